"""jax.ad_checkpoint: checkpoint (remat), checkpoint_name and the policies.
shmap's backward pass reads the forward values from the program, so they
change nothing (see shmap.checkpoint)."""
from ._grad import checkpoint, checkpoint_name, checkpoint_policies, remat

__all__ = ["checkpoint", "checkpoint_name", "checkpoint_policies", "remat"]
