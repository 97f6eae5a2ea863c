#!/usr/bin/python3
"""A decoder block, its loss and its training, written as JAX code is (with
shmap for jax), on a local cluster of 2 workers x 2 devices with the batch
sharded over 'data': an embedding lookup, layer norm, causal attention
(einsum, tril, softmax), a gelu MLP, tied logits and a cross-entropy with
take_along_axis. The params are a dict; each function is one jit program
the service lowers to per-device code. Every result is checked against
numpy: the loss's value, and its gradient (shmap.value_and_grad) against
central differences of numpy's loss in float64; then a few steps of SGD.

    PYTHONPATH=python:build/python /usr/bin/python3 examples/python/transformer.py
"""
import sys

import numpy as np

import shmap
from shmap import P
from shmap import numpy as jnp

B, T, D, H, V = 8, 16, 32, 4, 64  # batch, tokens, width, heads, vocabulary


def block(p, tok, xp=jnp):
    """The forward pass; xp is shmap.numpy, or numpy for the reference."""
    if xp is np:
        x = p["emb"][tok]
    else:  # the gather's result sharded as the tokens are (JAX asks for it)
        x = p["emb"].at[tok].get(out_sharding=P("data", None, None))

    def norm(x):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / xp.sqrt(v + 1e-5) * p["scale"]

    h = norm(x)
    q, k, v = ((h @ p[w]).reshape(B, T, H, D // H) for w in ("wq", "wk", "wv"))
    s = xp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(D // H)
    s = xp.where(xp.tril(xp.ones((T, T), np.float32)) > 0, s, -1e9)
    s = s - s.max(-1, keepdims=True)
    a = xp.exp(s) / xp.exp(s).sum(-1, keepdims=True)
    x = x + xp.einsum("bhts,bshd->bthd", a, v).reshape(B, T, D) @ p["wo"]
    u = norm(x) @ p["w1"]
    u = u * 0.5 * (1 + xp.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u ** 3)))  # gelu
    return x + u @ p["w2"]


def loss(p, tok, labels, xp=jnp):
    logits = block(p, tok, xp) @ p["emb"].T
    z = logits - logits.max(-1, keepdims=True)
    logp = z - xp.log(xp.exp(z).sum(-1, keepdims=True))
    picked = xp.take_along_axis(logp, labels[..., None], axis=-1)
    accuracy = (logits.argmax(-1) == labels).mean()
    return -picked.mean(), accuracy


def main():
    rng = np.random.default_rng(0)
    shapes = {"emb": (V, D), "wq": (D, D), "wk": (D, D), "wv": (D, D), "wo": (D, D),
              "w1": (D, 4 * D), "w2": (4 * D, D)}
    params_np = {k: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)
                 for k, s in shapes.items()}
    params_np["scale"] = np.ones(D, np.float32)
    tok_np = rng.integers(0, V, (B, T)).astype(np.int32)
    labels_np = np.roll(tok_np, -1, axis=1)

    with shmap.local_cluster(workers=2, devices_per_worker=2):
        mesh = shmap.make_mesh((4,), ("data",))
        shmap.set_mesh(mesh)
        params = {k: shmap.device_put(v, P()) for k, v in params_np.items()}  # replicated
        tok = shmap.device_put(tok_np, P("data"))
        labels = shmap.device_put(labels_np, P("data"))

        out = shmap.jit(block)(params, tok)
        want = block(params_np, tok_np, np)
        err = float(np.abs(np.asarray(out) - want).max())
        print(f"block       {shmap.typeof(out):20s} max |shmap - numpy| = {err:.2e}")
        nll, acc = shmap.jit(loss)(params, tok, labels)
        want_nll, want_acc = loss(params_np, tok_np, labels_np, np)
        print(f"loss        {float(nll):.6f} (numpy {want_nll:.6f}), accuracy {float(acc):.4f} "
              f"(numpy {want_acc:.4f})")
        ok = err < 1e-4 and abs(float(nll) - want_nll) < 1e-4 * abs(want_nll) and \
            float(acc) == want_acc
        lowered = shmap.jit(loss).lower(params, tok, labels).as_text().split("# lowered:")[1]
        print("the lowered program's collectives:", collectives(lowered))

        # the gradient, against central differences of numpy's loss (float64)
        (nll, acc), grads = shmap.jit(shmap.value_and_grad(loss, has_aux=True))(
            params, tok, labels)
        p64 = {k: v.astype(np.float64) for k, v in params_np.items()}
        worst = 0.0
        for _ in range(3):
            d = {k: rng.standard_normal(v.shape) for k, v in p64.items()}
            eps = 1e-5
            fd = (loss({k: p64[k] + eps * d[k] for k in d}, tok_np, labels_np, np)[0] -
                  loss({k: p64[k] - eps * d[k] for k in d}, tok_np, labels_np, np)[0]) / (2 * eps)
            got = sum(float((np.asarray(grads[k], np.float64) * d[k]).sum()) for k in d)
            worst = max(worst, abs(got - fd) / abs(fd))
        print(f"gradient    {len(grads)} params, directional derivatives within {worst:.1e} of "
              f"numpy's central differences; d emb: {shmap.typeof(grads['emb'])}")
        ok = ok and worst < 1e-3

        @shmap.jit
        def train_step(p, tok, labels, lr=0.5):
            (nll, _), g = shmap.value_and_grad(loss, has_aux=True)(p, tok, labels)
            return shmap.tree.map(lambda w, dw: w - lr * dw, p, g), nll

        losses = []
        for _ in range(5):
            params, nll = train_step(params, tok, labels)
            losses.append(float(nll))
        print("SGD steps   loss " + " -> ".join(f"{v:.4f}" for v in losses))
        step_lowered = train_step.lower(params, tok, labels).as_text().split("# lowered:")[1]
        print("a training step's collectives:", collectives(step_lowered))
        ok = ok and all(b < a for a, b in zip(losses, losses[1:]))
    print("the transformer example matches numpy" if ok else "the transformer example DIFFERS")
    return 0 if ok else 1


def collectives(lowered):
    return {op: lowered.count(op + "(") for op in ("all_gather", "psum", "pmean", "pmax",
                                                  "psum_scatter", "all_to_all")
            if op + "(" in lowered}


if __name__ == "__main__":
    sys.exit(main())
