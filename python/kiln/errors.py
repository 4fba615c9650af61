"""The one exception kiln raises."""


class Error(Exception):
    """A kiln error: a refused call, a parse error, a failed load.

    ``status`` names the cause: for a call, the ABI status (``"dtype"``, ``"shape"``,
    ``"align"``, ...); for libkiln functions, the ``kiln_status`` name; None when the check
    was made in Python before calling."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status
