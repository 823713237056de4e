"""The base of every response model and the one timestamp form (see app.responses)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, PlainSerializer, WithJsonSchema

from app.domain.event_wire import format_timestamp

Timestamp = Annotated[datetime, PlainSerializer(format_timestamp, return_type=str, when_used="json"),
                      WithJsonSchema({"type": "string", "format": "date-time"})]
Json = dict[str, Any]
Parts = list[Json]


class Out(BaseModel):
    # Rows carry more columns than the API shows (hashes, owner ids): ignore them.
    model_config = ConfigDict(extra="ignore")

    @classmethod
    def of(cls, row: Mapping[str, Any], **extra: Any) -> Self:
        return cls.model_validate({**row, **extra})

    def wire(self) -> Json:
        """The JSON-ready dict (event payloads are dicts; h/a's serializer encodes them)."""
        return self.model_dump(mode="json")
