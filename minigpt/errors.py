"""Typed errors for bad input. Each names the file, what was expected, what was found,
and the likely causes, so the CLI can print it (exit 2) and the UI can show it."""

from __future__ import annotations


def one_line(text: str) -> str:
    """`text` with every character a terminal would not print as itself (a newline or an escape in a
    file name, a byte of a non-UTF-8 path) written as its Python escape: a message stays one line,
    and a file name cannot move the cursor or recolour the screen."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


class MiniGPTError(Exception):
    """Base for every error caused by the user's input (files, flags, settings). The message and
    each cause are one line each (`one_line`), whatever the file names in them hold."""

    def __init__(self, message: str, *, path: object | None = None, causes: list[str] | None = None):
        self.message = one_line(message)
        self.path = None if path is None else str(path)
        self.causes = [one_line(c) for c in causes or []]
        super().__init__(self.__str__())

    def __str__(self) -> str:
        text = self.message
        if self.causes:
            text += "\n  likely causes: " + "; ".join(self.causes)
        return text


class TokenizerError(MiniGPTError):
    """A tokenizer file is unreadable, or text/IDs do not fit the vocabulary."""


class UnknownCharactersError(TokenizerError):
    """`encode` met characters that are not in the vocabulary."""

    def __init__(self, unknown: dict[str, list[int]], *, path: object | None = None):
        self.unknown = unknown  # char -> positions in the text (first few)
        shown = ", ".join(
            f"{ch!r} at {positions[:5]}{'...' if len(positions) > 5 else ''}"
            for ch, positions in list(unknown.items())[:10]
        )
        more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
        of = f" of {path}" if path else ""
        super().__init__(
            f"{len(unknown)} character(s) not in the vocabulary{of}: {shown}{more}",
            path=path,
            causes=["the tokenizer was built from other text", "the text was decoded with another encoding"],
        )


class DataError(MiniGPTError):
    """Corpus text or encoded token files are missing, malformed or too short."""


class CheckpointError(MiniGPTError):
    """A checkpoint is missing, not a regular file, truncated, corrupt, or does not fit the model."""


class ConfigError(MiniGPTError):
    """A model or training configuration is invalid."""


class SamplerSettingsError(MiniGPTError):
    """A generation setting is out of its valid range."""


class ModelSpecError(MiniGPTError):
    """A user's `--model FILE.py:CLASS[:CONFIG]` could not be imported or built."""


class TrainingDiverged(MiniGPTError):
    """Training met a non-finite loss or gradient and stopped before saving it."""

    def __init__(self, message: str, *, step: int, last_good: str | None):
        self.step = step
        self.last_good = last_good
        super().__init__(message, path=last_good)


class WorkspaceLockedError(MiniGPTError):
    """Another process (a training run) is writing this workspace; `holder` names it."""

    def __init__(
        self, message: str, *, path: object | None = None, holder: object | None = None, causes: list[str] | None = None
    ):
        # a minigpt.io.lock.LockHolder, or None when its record is unreadable (typed `object`: this
        # module is the floor minigpt.io stands on, and may not import it even for a type)
        self.holder = holder
        super().__init__(message, path=path, causes=causes)


class UnsafePathError(MiniGPTError):
    """A path where minigpt writes, locks or reads a file is a symbolic link, a FIFO, a device or a
    folder: it is refused before it is opened (a link could point outside the workspace, a FIFO
    would block), or a workspace's folder leads into another workspace."""


class ResourceError(MiniGPTError):
    """A model or run would need more memory than the device has (estimated before allocating)."""


class FileSystemError(MiniGPTError, OSError):
    """The OS refused a read or write (disk full, read-only, permission denied, not a directory...).

    Also an `OSError`, so code that already catches `OSError` keeps working; `errno` is the OS's.
    Built by `minigpt.io.files.os_error`, which classifies by errno, never by message text."""

    def __init__(
        self, message: str, *, path: object | None = None, errno: int | None = None, causes: list[str] | None = None
    ):
        super().__init__(message, path=path, causes=causes)
        self.errno = errno
