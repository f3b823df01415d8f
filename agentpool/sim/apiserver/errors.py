"""API errors as the real apiserver reports them: ``Status`` objects.

Owns the exception tree raised by the store (and by the emulator's direct
Python API) and its mapping to ``kind: Status`` bodies::

    ApiError                 any failure with an HTTP code and a Status reason
    ├── BadRequestError            400 malformed body, selector or query
    ├── NotFoundError              404
    ├── AlreadyExistsError         409 create of an existing name
    ├── ConflictError              409 stale metadata.resourceVersion / precondition
    ├── GoneError                  410 resourceVersion older than the kept history
    ├── UnsupportedMediaTypeError  415 patch type we do not implement
    └── (injected faults build ApiError directly: 500, 429, 410...)
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class StatusDetails(TypedDict, total=False):
    name: str
    group: str
    kind: str
    retryAfterSeconds: int
    causes: list[dict[str, str]]


class StatusObject(TypedDict):
    kind: str
    apiVersion: str
    metadata: dict[str, Any]
    status: str
    message: str
    reason: str
    code: int
    details: NotRequired[StatusDetails]


class ApiError(Exception):
    """A failed request, carrying what its ``Status`` body says."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: StatusDetails | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after
        """Seconds for a ``Retry-After`` header (429, some 5xx)."""

    def status(self) -> StatusObject:
        body: StatusObject = {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        }
        details: StatusDetails = dict(self.details or {})  # type: ignore[assignment]
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        if details:
            body["details"] = details
        return body


def _details(plural: str, group: str, name: str) -> StatusDetails:
    details: StatusDetails = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return details


def _qualified(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


class BadRequestError(ApiError):
    def __init__(self, message: str) -> None:
        super().__init__(400, "BadRequest", message)


class NotFoundError(ApiError):
    def __init__(self, plural: str, group: str, name: str) -> None:
        super().__init__(
            404, "NotFound", f'{_qualified(plural, group)} "{name}" not found',
            _details(plural, group, name),
        )


class AlreadyExistsError(ApiError):
    def __init__(self, plural: str, group: str, name: str) -> None:
        super().__init__(
            409, "AlreadyExists", f'{_qualified(plural, group)} "{name}" already exists',
            _details(plural, group, name),
        )


class ConflictError(ApiError):
    def __init__(self, plural: str, group: str, name: str, why: str) -> None:
        # Same wording as the apiserver, which clients and humans grep for.
        super().__init__(
            409, "Conflict",
            f'Operation cannot be fulfilled on {_qualified(plural, group)} "{name}": {why}',
            _details(plural, group, name),
        )


class GoneError(ApiError):
    def __init__(self, message: str) -> None:
        super().__init__(410, "Expired", message)


class UnsupportedMediaTypeError(ApiError):
    def __init__(self, content_type: str) -> None:
        super().__init__(
            415, "UnsupportedMediaType",
            f"the body of the request was in an unknown format ({content_type!r}); accepted "
            "media types include: application/json-patch+json, application/merge-patch+json, "
            "application/strategic-merge-patch+json",
        )
