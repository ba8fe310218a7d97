"""`trident run FLOW.yaml`: raw text to an evaluated model, one resumable stage at a time."""
