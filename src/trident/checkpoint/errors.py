"""The errors of reading a checkpoint, below every module that raises them."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be trusted or does not fit the model; the message names the file."""


class DamagedCheckpoint(CheckpointError):
    """Bytes of a checkpoint file differ from what its manifest recorded (corrupted or truncated)."""
