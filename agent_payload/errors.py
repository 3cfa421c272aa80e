"""The exception tree: misuse by the calling program and failures of the outside world are
separate branches, so a caller catches exactly what it can act on::

    AgentPayloadError
    ├── UsageError                    the calling program passed something wrong
    │   ├── InvalidPayloadError       payload is not JSON data / its root is not object or array
    │   │   └── SessionFileError      a saved session file is damaged: names the file and where
    │   ├── InvalidChangeRequestError change request is not an object / holds non-JSON data
    │   ├── ConfigurationError        bad markers, permission rule, missing SDK extra, ...
    │   └── ModelRequestsBlockedError a real model request while testing forbids them
    ├── LimitExceededError            depth / size / change-request size above a limit
    ├── MergeConflictError            strict merge refused: ``.report`` has every conflict
    │   └── ConcurrentChangeError     a late request collides with an edit applied since its base
    ├── PayloadValidationError        merged payload fails its pydantic type: ``.errors``
    ├── StalePayloadError             the payload changed since the version the run started from
    ├── ModelReplyError               the model's reply cannot be used: ``.feedback`` for the model
    │   ├── ReplySyntaxError          no JSON could be read from the reply
    │   │   └── AmbiguousReplyError   the reply holds several different change requests
    │   ├── TruncatedReplyError       the reply was cut off (length / max_tokens); never applied
    │   ├── NoChangeRequestError      the reply holds no change request (prose)
    │   │   └── RefusalError          the model refused
    │   ├── UnknownFieldError         top-level fields that are not part of the format
    │   └── RetryWithFeedback         raised by a user validator: "ask again with this message"
    ├── ProviderError                 transport failure after the SDK's own retries (chained)
    ├── FileWriteError                a file could not be written; the old file is whole (chained)
    └── RetriesExhaustedError         the correction loop ran out of attempts or tokens
        └── ReadsExhaustedError       outline mode: the model used up max_reads without replying
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agent_payload._paths import format_payload_path

if TYPE_CHECKING:
    from agent_payload.report import MergeReport, Problem
    from agent_payload.usage import Usage

__all__ = [
    "AgentPayloadError",
    "AmbiguousReplyError",
    "ConcurrentChangeError",
    "ConfigurationError",
    "FileWriteError",
    "InvalidChangeRequestError",
    "InvalidPayloadError",
    "LimitExceededError",
    "MergeConflictError",
    "ModelReplyError",
    "ModelRequestsBlockedError",
    "NoChangeRequestError",
    "PayloadValidationError",
    "ProviderError",
    "ReadsExhaustedError",
    "RefusalError",
    "ReplySyntaxError",
    "RetriesExhaustedError",
    "RetryWithFeedback",
    "SessionFileError",
    "StalePayloadError",
    "TruncatedReplyError",
    "UnknownFieldError",
    "UsageError",
]


class AgentPayloadError(Exception):
    """Base of every error raised on purpose: ``problems`` behind it, ``path`` (where, as in the
    report); ``attempts``, ``usage``, ``run_id`` when it ends an agent run."""

    attempts: int | None = None
    usage: Usage | None = None
    run_id: str | None = None
    problems: Sequence[Problem] = ()

    def __init__(self, *args: object, **fields: Any) -> None:
        super().__init__(*args)
        declared = _declared(type(self))
        for name, value in fields.items():  # the keyword fields a subclass declares
            if name not in declared:
                raise TypeError(f"{type(self).__name__}() got an unexpected keyword {name!r}")
            setattr(self, name, value)
        if missing := [name for name in declared if not hasattr(self, name)]:
            raise TypeError(f"{type(self).__name__}() needs the keyword(s) {', '.join(missing)}")


def _declared(cls: type) -> tuple[str, ...]:
    """The fields an error class and its bases declare (their annotations)."""
    return tuple(dict.fromkeys(n for c in cls.__mro__ for n in vars(c).get("__annotations__", {})))


# --- misuse by the calling program -------------------------------------------------------


class UsageError(AgentPayloadError):
    """The calling program passed something the library cannot work with."""


class InvalidPayloadError(UsageError, ValueError):
    """The payload is not JSON data, or its root is neither an object nor an array."""

    def __init__(self, message: str, *, path: Sequence[str | int] = ()) -> None:
        super().__init__(message)
        self.payload_path: tuple[str | int, ...] = tuple(path)
        self.path: str = format_payload_path(self.payload_path, root="")


class SessionFileError(InvalidPayloadError):
    """A saved session ``file`` cannot be loaded (``where`` in it, also ``path``)."""

    def __init__(self, message: str, *, file: str, where: str = "") -> None:
        super().__init__(message)
        self.file = file
        self.where = where
        self.path = where


class InvalidChangeRequestError(UsageError, ValueError):
    """The change request is not an object, or holds data that is not JSON (at ``path``)."""

    path: str = ""


class ConfigurationError(UsageError, ValueError):
    """An option is wrong: markers, a permission rule, a missing SDK extra, ..."""


class ModelRequestsBlockedError(UsageError, RuntimeError):
    """A request to a real model was made while ``agent_payload.testing`` forbids them."""


# --- limits ----------------------------------------------------------------------------------


class LimitExceededError(AgentPayloadError, ValueError):
    """An input is deeper or larger than the ``limit`` (``value`` found, ``maximum`` allowed)."""

    limit: str
    value: int
    maximum: int
    path: str = ""


# --- merge outcomes --------------------------------------------------------------------------


class MergeConflictError(AgentPayloadError):
    """Strict mode: the change request conflicts with the payload; nothing was applied."""

    def __init__(self, message: str, *, report: MergeReport) -> None:
        super().__init__(message)
        self.report = report
        from agent_payload.report import Problem  # report imports this module

        self.problems = [
            Problem(kind="conflict", message=issue.message, path=issue.path, code=issue.code)
            for issue in report.conflicts
        ]


class ConcurrentChangeError(MergeConflictError):
    """A change request collides with what was applied since its base (MERGE.md section 9);
    nothing was applied. A store also sets ``current`` (the payload) and ``version``."""

    current: Any = None
    version: Any = None


class PayloadValidationError(AgentPayloadError, ValueError):
    """The merged ``payload`` does not fit its pydantic type (``errors``: path, message)."""

    def __init__(
        self,
        message: str,
        *,
        errors: Sequence[tuple[tuple[str | int, ...], str]],
        payload: Any = None,
    ) -> None:
        super().__init__(message)
        self.errors = list(errors)
        self.payload = payload
        from agent_payload.report import Problem  # report imports this module

        self.problems = [
            Problem(kind="validation", message=text, path=format_payload_path(where, root=""))
            for where, text in self.errors
        ]


class StalePayloadError(AgentPayloadError):
    """The payload is no longer the version the run started from (``expected``, ``actual``);
    nothing was applied."""

    expected: str
    actual: str


# --- the outside world: the model's reply ------------------------------------------------------


class ModelReplyError(AgentPayloadError):
    """The model's reply cannot be used as it is: ``feedback`` is the text for the model (as
    given, else rendered from ``problems`` when first read), ``reply`` the raw reply."""

    def __init__(
        self,
        message: str,
        *,
        reply: str = "",
        feedback: str = "",
        problems: Sequence[Problem] = (),
    ) -> None:
        super().__init__(message)
        self.reply = reply
        self.problems: list[Problem] = list(problems)
        self._message = message
        self._feedback = feedback

    @property
    def feedback(self) -> str:
        """The text to send back to the model."""
        if not self._feedback and self.problems:
            # The correction template; the prompts sit above the errors, hence imported late.
            from agent_payload.prompts import render_correction

            truncated = isinstance(self, TruncatedReplyError)
            self._feedback = render_correction(self.problems, reply_was_truncated=truncated)
        return self._feedback or self._message

    @feedback.setter
    def feedback(self, text: str) -> None:
        self._feedback = text


class ReplySyntaxError(ModelReplyError):
    """No JSON object could be read from the reply, even leniently."""


class AmbiguousReplyError(ReplySyntaxError):
    """The reply holds two or more different change requests: none of them is applied."""


class TruncatedReplyError(ModelReplyError):
    """The reply was cut off by a token limit; a truncated change request is never applied."""


class NoChangeRequestError(ModelReplyError):
    """The reply holds no change request (prose, an empty answer)."""


class RefusalError(NoChangeRequestError):
    """The model refused the task."""


class UnknownFieldError(ModelReplyError):
    """The change request has top-level fields that are not part of the format."""

    def __init__(self, message: str, *, fields: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.fields = list(fields)


class RetryWithFeedback(ModelReplyError):
    """Raise from a validator to ask the model again with ``feedback`` (about ``path``)."""

    def __init__(self, feedback: str, *, path: str | None = None) -> None:
        super().__init__(feedback, feedback=feedback)
        self.path: str = path or ""


# --- the outside world: the provider -----------------------------------------------------------


class ProviderError(AgentPayloadError):
    """The ``provider`` failed after the SDK's own retries (``status_code``, whether
    ``retryable``); chained to the SDK's exception."""

    provider: str
    status_code: int | None = None
    retryable: bool = False


# --- the outside world: the file system --------------------------------------------------------


class FileWriteError(AgentPayloadError, OSError):
    """Writing the file at ``path`` failed or was refused; it is as it was (atomic writes)."""

    path: str


class RetriesExhaustedError(AgentPayloadError):
    """The correction loop gave up; the payload is unchanged (``problems``: the last try's)."""

    def __init__(
        self,
        message: str,
        *,
        attempts: int,
        usage: Usage,
        last_reply: str | None = None,
        problems: Sequence[Problem] = (),
        replies: Sequence[str] = (),
        **fields: Any,
    ) -> None:
        super().__init__(message, attempts=attempts, usage=usage, **fields)
        self.last_reply = last_reply
        self.problems: list[Problem] = list(problems)
        self.replies = list(replies)


class ReadsExhaustedError(RetriesExhaustedError):
    """Outline mode: the model used up its ``reads`` without sending a change request
    (``last_call``: the last read it made)."""

    reads: int
    last_call: str
