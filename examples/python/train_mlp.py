#!/usr/bin/python3
"""A training loop as JAX code writes one, with `import shmap as jax`: a
classifier's params in a dict, value_and_grad with has_aux, global-norm
gradient clipping and momentum with jax.tree.map, a jit'd train step over
batches sharded on 'data', per-example losses with vmap, and two steps run
inside one jit with lax.scan; the initial weights drawn with jax.random,
and input noise drawn in the train step from a key it takes and returns.
On a local cluster of 2 workers x 2 devices; checked: the loss falls, the
accuracy rises, and vmap's per-example losses average to the batch's loss.

    PYTHONPATH=python:build/python /usr/bin/python3 examples/python/train_mlp.py
"""
import sys
from functools import partial

import numpy as np

import shmap as jax
from shmap import P, lax
from shmap import numpy as jnp

N, D, H, C = 256, 16, 32, 4  # examples, features, hidden units, classes


def model(p, x):
    h = jax.nn.relu(x @ p["w1"] + p["b1"])
    return h @ p["w2"] + p["b2"]


def loss_fn(p, x, y):
    logp = jax.nn.log_softmax(model(p, x))
    nll = -jnp.take_along_axis(logp, y[:, None], axis=1).mean()
    return nll, (model(p, x).argmax(-1) == y).mean()


@partial(jax.jit, donate_argnums=(0, 1))
def train_step(p, m, key, x, y, lr=0.1, beta=0.9):
    key, sub = jax.random.split(key)  # the key is traced: drawn in the program
    x = x + 0.05 * jax.random.normal(sub, x.shape)  # input noise
    (loss, acc), g = jax.value_and_grad(loss_fn, has_aux=True)(p, x, y)
    gnorm = jnp.sqrt(sum(jnp.sum(v * v) for v in jax.tree.leaves(g)))
    g = jax.tree.map(lambda v: v * jnp.minimum(1.0, 5.0 / gnorm), g)  # clip to norm 5
    m = jax.tree.map(lambda mv, gv: beta * mv + gv, m, g)
    p = jax.tree.map(lambda pv, mv: pv - lr * mv, p, m)
    return p, m, key, loss, acc


@jax.jit
def two_steps(p, xs, ys):
    def step(q, xy):
        g = jax.grad(lambda q: loss_fn(q, *xy)[0])(q)
        return jax.tree.map(lambda a, b: a - 0.05 * b, q, g), None
    return lax.scan(step, p, (xs, ys))[0]


def main():
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((N, D)).astype(np.float32)
    y_np = np.argmax(x_np @ rng.standard_normal((D, C)), axis=1).astype(np.int32)
    with jax.local_cluster(workers=2, devices_per_worker=2):
        jax.set_mesh(jax.make_mesh((4,), ("data",)))
        key, k1, k2 = jax.random.split(jax.random.key(0), 3)  # JAX's keys: JAX's values
        params = {"w1": jax.random.normal(k1, (D, H)) * 0.3,
                  "b1": jnp.zeros(H),
                  "w2": jax.random.normal(k2, (H, C)) * 0.3,
                  "b2": jnp.zeros(C)}
        params = jax.tree.map(lambda v: jax.device_put(v, P()), params)  # replicated
        mom = jax.tree.map(jnp.zeros_like, params)
        losses, accs = [], []
        for epoch in range(3):
            for i in range(0, N, 64):
                xb = jax.device_put(x_np[i:i + 64], P("data"))
                yb = jax.device_put(y_np[i:i + 64], P("data"))
                params, mom, key, loss, acc = train_step(params, mom, key, xb, yb)
            losses.append(float(loss))
            accs.append(float(acc))
            print(f"epoch {epoch}  loss {losses[-1]:.4f}  accuracy {accs[-1]:.3f}")
        xb, yb = jax.device_put(x_np[:64], P("data")), jax.device_put(y_np[:64], P("data"))
        per_example = jax.jit(jax.vmap(lambda x, y: loss_fn(params, x[None], y[None])[0]))(
            xb, yb)
        batch = float(jax.jit(lambda x, y: loss_fn(params, x, y)[0])(xb, yb))
        print(f"vmap: {per_example.shape[0]} per-example losses ({jax.typeof(per_example)}), "
              f"mean {float(per_example.mean()):.5f}, the batch's loss {batch:.5f}")
        p2 = two_steps(params, jax.device_put(x_np[:128].reshape(2, 64, D), P(None, "data")),
                       jax.device_put(y_np[:128].reshape(2, 64), P(None, "data")))
        after = float(jax.jit(lambda x, y: loss_fn(p2, x, y)[0])(xb, yb))
        print(f"lax.scan of two SGD steps in one jit: loss {batch:.4f} -> {after:.4f}")
        ok = (losses[-1] < losses[0] and accs[-1] > accs[0] and
              abs(float(per_example.mean()) - batch) < 1e-5 and after < batch)
    print("the training example works" if ok else "the training example FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
