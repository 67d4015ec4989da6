"""The one exception type that reaches a user: its message is a complete, one-line instruction."""


class StressprobeError(Exception):
    """A user-facing error: bad input, bad config or an unusable model.

    The message names the file and line (or the config key or model) and says what to fix; it is
    printed as a single line without a traceback.
    """


def one_line_tail(text: str, lines: int) -> str:
    """The last non-blank `lines` lines of a process's output, joined into one line for an error message."""
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:])
