"""Cluster launch: a Slurm batch script derived from a config and its plan (`trident launch`)."""
