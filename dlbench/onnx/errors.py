"""The error every ONNX reading step raises for a model it cannot use."""


class ExtractionError(ValueError):
    """A model that cannot be extracted; the message names the file and, where it applies, the node."""
