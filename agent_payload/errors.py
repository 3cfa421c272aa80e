"""The exception tree of agent_payload.

Every error the library raises on purpose is an ``AgentPayloadError``. Misuse by the calling
program and failures of the outside world (the model's reply, the provider) are separate
branches, so a caller can catch exactly what it can act on::

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

Messages say where (a payload or change-request path), what was expected, what was found,
and what to do. Errors that the model must see carry a separate ``feedback`` text.

Two attributes mean the same on every error:

* ``problems``: the structured problems behind the error, a sequence of
  ``agent_payload.report.Problem`` (empty where there are none): a ``ModelReplyError``'s
  parse/validation/conflict problems, a ``MergeConflictError``'s conflicts, a
  ``PayloadValidationError``'s validation errors, a ``RetriesExhaustedError``'s problems of the
  last attempt.
* ``path``: where, always a ``str`` written as in the report and in every message
  (``""`` when the error has no place): a change-request path (``updateElements.items[3].qty``,
  ``InvalidChangeRequestError``, ``LimitExceededError`` of a request, ``RetryWithFeedback``) or a
  payload path (``items[3].qty``, ``InvalidPayloadError``, ``LimitExceededError`` of a payload).
  The same holds for ``Problem.path`` and ``Issue.path``. Where a payload path is known as
  segments it is also ``payload_path``, a tuple of keys and indices (``("items", 3, "qty")``),
  as on ``Issue``. ``FileWriteError.path`` and ``SessionFileError.file`` name a file.

Any error that ends an agent run (a ``ProviderError`` on the third attempt, a ``RefusalError``,
a ``StalePayloadError`` ...) carries ``attempts`` and ``usage`` (tokens summed over the run's
attempts so far), so failed runs can be accounted for; both are ``None`` outside a run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    """Base of every error agent_payload raises on purpose.

    ``attempts`` and ``usage`` are set by the agent when the error ends a run (``None``
    otherwise): how many model requests the run made and the tokens they used.
    """

    attempts: int | None = None
    usage: Usage | None = None
    run_id: str | None = None
    """The id of the run this error ended (``run(..., run_id=)``), ``None`` outside a run."""
    problems: Sequence[Problem] = ()
    """The structured problems behind the error (empty where there are none)."""


# --- misuse by the calling program -------------------------------------------------------


class UsageError(AgentPayloadError):
    """The calling program passed something the library cannot work with."""


class InvalidPayloadError(UsageError, ValueError):
    """The payload is not JSON data, or its root is neither an object nor an array.

    ``path`` is the payload path of the offending value written ``items[3].price`` (``""`` for
    the root); ``payload_path`` the same as a tuple of keys and indices (``()`` for the root).
    """

    def __init__(self, message: str, *, path: Sequence[str | int] = ()) -> None:
        super().__init__(message)
        self.payload_path: tuple[str | int, ...] = tuple(path)
        self.path: str = format_payload_path(self.payload_path, root="")


class SessionFileError(InvalidPayloadError):
    """A saved session file cannot be loaded: not UTF-8, not JSON, cut short, nested too deeply,
    a field missing or of the wrong type, no payload, a newer format version.

    ``file`` is the file's path, ``where`` the place in it (``turns[2].usage``; ``""`` for the
    whole file), which is also ``path``. Always chained to the underlying error where there is
    one.
    """

    def __init__(self, message: str, *, file: str, where: str = "") -> None:
        super().__init__(message)
        self.file = file
        self.where = where
        self.path = where


class InvalidChangeRequestError(UsageError, ValueError):
    """The change request is not an object, or holds data that is not JSON.

    ``path`` is the change-request path written as in the report (``updateElements.a[3]``).
    """

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class ConfigurationError(UsageError, ValueError):
    """An option is wrong: markers, a permission rule, a missing SDK extra, ..."""


class ModelRequestsBlockedError(UsageError, RuntimeError):
    """A request to a real model was made while ``agent_payload.testing`` forbids them."""


# --- limits ----------------------------------------------------------------------------------


class LimitExceededError(AgentPayloadError, ValueError):
    """An input is deeper or larger than the configured limit.

    ``limit`` names the limit (``max_depth``, ``max_nodes``, ``max_request_nodes``, ...),
    ``value`` what was found and ``maximum`` the limit in force; ``path`` where it was hit.
    """

    def __init__(
        self,
        message: str,
        *,
        limit: str,
        value: int,
        maximum: int,
        path: str = "",
    ) -> None:
        super().__init__(message)
        self.limit = limit
        self.value = value
        self.maximum = maximum
        self.path = path


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
    """A change request collides with what was applied since the payload it was written
    against (MERGE.md section 9): ``.report`` holds one ``concurrent_change`` conflict per
    colliding entry; nothing of the request was applied. A surface that keeps the payload
    (``VersionedStore``, ``PayloadStore``) also sets ``current`` (the current payload) and
    ``version`` (its version), so a correction can be judged against them; both are ``None``
    from the pure ``rebase_change_request``."""

    current: Any = None
    version: Any = None


class PayloadValidationError(AgentPayloadError, ValueError):
    """The merged payload does not validate against its pydantic type.

    ``errors`` is a list of ``(payload_path, message)``; ``payload`` the merged (invalid) data;
    ``problems`` the same errors as ``Problem`` of kind ``validation`` (paths written
    ``items[3].price``).
    """

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
    """The payload is no longer the version the run started from; nothing was applied."""

    def __init__(self, message: str, *, expected: str, actual: str) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual


# --- the outside world: the model's reply ------------------------------------------------------


FeedbackRenderer = Callable[["Sequence[Problem]", bool], str]
"""Renders the correction for ``problems`` (the flag: the reply was cut off)."""

_renderers: list[FeedbackRenderer] = []


def install_feedback_renderer(render: FeedbackRenderer) -> None:
    """Install how a ``ModelReplyError`` built from its problems alone renders ``feedback``.

    ``agent_payload.prompts`` installs its correction template when it is imported (the package
    imports it): the errors and the parser sit below the prompts and never import them.
    """
    _renderers[:] = [render]


class ModelReplyError(AgentPayloadError):
    """The model's reply cannot be used as it is.

    ``feedback`` is the text to send back to the model: as given, else rendered from
    ``problems`` by the correction template when first read (errors raised by the parser carry
    only the structured problems); ``reply`` the raw reply text; ``problems`` the structured
    list behind the feedback.
    """

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
        if not self._feedback and self.problems and _renderers:
            truncated = isinstance(self, TruncatedReplyError)
            self._feedback = _renderers[0](self.problems, truncated)
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
    """Raise from a user validator to ask the model again with ``feedback``; ``path`` (optional)
    is the payload path the feedback is about, written ``items[3].price``."""

    def __init__(self, feedback: str, *, path: str | None = None) -> None:
        super().__init__(feedback, feedback=feedback)
        self.path: str = path or ""


# --- the outside world: the provider -----------------------------------------------------------


class ProviderError(AgentPayloadError):
    """The provider failed (rate limit, server error, timeout, connection) after the SDK's own
    retries. Always chained to the SDK's exception (``__cause__``)."""

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status_code: int | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.status_code = status_code
        self.retryable = retryable


# --- the outside world: the file system --------------------------------------------------------


class FileWriteError(AgentPayloadError, OSError):
    """Writing a file failed (disk full, a file-size limit, permissions, ...) or was refused
    before anything was written (a read-only file or folder, a file with several hard links, a
    directory or another file that is not a regular one).

    Writes are atomic (``agent_payload._files.atomic_write_text``): the file at ``path`` is
    exactly as it was before the attempt. Always chained to an ``OSError`` (``__cause__``:
    for a refusal, ``PermissionError``, ``IsADirectoryError`` or an ``OSError`` with the errno
    that fits).
    """

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class RetriesExhaustedError(AgentPayloadError):
    """The correction loop gave up. The caller's payload is unchanged.

    Carries ``attempts``, ``usage`` (summed over all attempts), ``last_reply`` (raw text) and
    ``problems`` (the problems of the last attempt).
    """

    def __init__(
        self,
        message: str,
        *,
        attempts: int,
        usage: Usage,
        last_reply: str | None,
        problems: Sequence[Problem],
        replies: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.usage = usage
        self.last_reply = last_reply
        self.problems: list[Problem] = list(problems)
        self.replies = list(replies)


class ReadsExhaustedError(RetriesExhaustedError):
    """Outline mode: the model asked for more reads of the payload than ``max_reads`` allows
    and sent no change request. The caller's payload is unchanged. ``reads`` is how many reads
    were answered; ``last_call`` names the read that was refused."""

    def __init__(
        self,
        message: str,
        *,
        attempts: int,
        usage: Usage,
        reads: int,
        last_call: str,
        replies: Sequence[str] = (),
    ) -> None:
        super().__init__(
            message,
            attempts=attempts,
            usage=usage,
            last_reply=None,
            problems=(),
            replies=replies,
        )
        self.reads = reads
        self.last_call = last_call
