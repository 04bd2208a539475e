"""The error every ONNX reading step raises for a model it cannot use."""


class ExtractionError(ValueError):
    """A model that cannot be extracted; the message names the file and, where it applies, the node."""


class ModelSettingError(ExtractionError):
    """What the configuration asks of the model cannot be: no file at ``model``, a ``dims.*`` the model lacks
    or one it leaves open, a batch size below 1. A configuration mistake, not a broken model."""


class UnreadableModel(ModelSettingError):
    """The file at ``model`` is no usable ONNX model: truncated, damaged, not ONNX at all, its weights missing
    or short, or rejected by the ONNX checker. Bad input like a wrong setting (exit 2): give another file."""
