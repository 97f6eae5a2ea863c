#!/usr/bin/python3
"""A small convolutional network as JAX code writes one, with `import shmap
as jax`: two 3x3 convolutions (lax.conv_general_dilated, NHWC / HWIO), ReLU,
2x2 max pooling (lax.reduce_window) and a dense layer,
trained with SGD and momentum in a jit'd step over batches sharded on
'data'. The task: 16x16 images of noise with a bright 3x3 spot, the class
the quadrant the spot lies in. On a local cluster of 2 workers x 2
devices; checked: the activations keep the batch's sharding (JAX's rule),
the first layer equals its definition computed in numpy, the loss falls
and the accuracy ends above 0.9.

    PYTHONPATH=python:build/python /usr/bin/python3 examples/python/train_cnn.py
"""
import sys
from functools import partial

import numpy as np

import shmap as jax
from shmap import P, lax
from shmap import numpy as jnp

N, S, B = 512, 16, 64  # examples, image side, batch
DN = ("NHWC", "HWIO", "NHWC")


def conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=DN)


def pool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def model(p, x):
    h = pool(jax.nn.relu(conv(x, p["c1"]) + p["b1"]))    # (B, 8, 8, 8)
    h = pool(jax.nn.relu(conv(h, p["c2"]) + p["b2"]))    # (B, 4, 4, 16)
    return h.reshape(h.shape[0], -1) @ p["w"] + p["b"]   # (B, 4)


def loss_fn(p, x, y):
    logits = model(p, x)
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1).mean()
    return nll, (logits.argmax(-1) == y).mean()


@partial(jax.jit, donate_argnums=(0, 1))
def train_step(p, m, x, y, lr=0.05, beta=0.9):
    (loss, acc), g = jax.value_and_grad(loss_fn, has_aux=True)(p, x, y)
    m = jax.tree.map(lambda mv, gv: beta * mv + gv, m, g)
    p = jax.tree.map(lambda pv, mv: pv - lr * mv, p, m)
    return p, m, loss, acc


def data(rng):
    x = 0.5 * rng.standard_normal((N, S, S, 1)).astype(np.float32)
    y = rng.integers(0, 4, N).astype(np.int32)
    for k in range(N):
        r = rng.integers(1, S // 2 - 2) + (S // 2 if y[k] >= 2 else 0)
        c = rng.integers(1, S // 2 - 2) + (S // 2 if y[k] % 2 else 0)
        x[k, r:r + 3, c:c + 3, 0] += 1.0
    return x, y


def np_conv_same(x, w):
    """The 3x3 'SAME' convolution by its definition."""
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros(x.shape[:3] + (w.shape[3],))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nhwc,co->nhwo", xp[:, i:i + S, j:j + S], w[i, j])
    return out


def main():
    x_np, y_np = data(np.random.default_rng(0))
    with jax.local_cluster(workers=2, devices_per_worker=2):
        jax.set_mesh(jax.make_mesh((4,), ("data",)))
        k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
        he = jax.nn.initializers.he_normal()
        params = {"c1": he(k1, (3, 3, 1, 8)), "b1": jnp.zeros(8),
                  "c2": he(k2, (3, 3, 8, 16)), "b2": jnp.zeros(16),
                  "w": he(k3, (256, 4)), "b": jnp.zeros(4)}
        params = jax.tree.map(lambda v: jax.device_put(v, P()), params)  # replicated
        mom = jax.tree.map(jnp.zeros_like, params)

        xb = jax.device_put(x_np[:B], P("data"))
        h = conv(xb, params["c1"])
        want = np_conv_same(x_np[:B], np.asarray(params["c1"]))
        err = float(np.abs(np.asarray(h) - want).max())
        print(f"first layer: {jax.typeof(xb)} -> {jax.typeof(h)} (the batch stays sharded), "
              f"max difference from its definition {err:.2e}")
        losses, accs = [], []
        for epoch in range(4):
            for i in range(0, N, B):
                xb = jax.device_put(x_np[i:i + B], P("data"))
                yb = jax.device_put(y_np[i:i + B], P("data"))
                params, mom, loss, acc = train_step(params, mom, xb, yb)
            losses.append(float(loss))
            accs.append(float(acc))
            print(f"epoch {epoch}  loss {losses[-1]:.4f}  accuracy {accs[-1]:.3f}")
        ok = (err < 1e-4 and jax.typeof(h) == f"f32[{B}@data,{S},{S},8]"
              and losses[-1] < losses[0] and accs[-1] > 0.9)
    print("the CNN example works" if ok else "the CNN example FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
