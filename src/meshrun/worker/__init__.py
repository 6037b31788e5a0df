"""What runs inside the workers: the bootstrap shim, ``meshrun.progress``,
``meshrun.init_distributed``, DCP checkpoints, the collective benchmark."""
