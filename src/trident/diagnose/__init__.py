"""`trident diagnose`: what stopped a run, from the ranks' flight-recorder dumps."""
