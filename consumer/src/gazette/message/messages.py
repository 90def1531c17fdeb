"""Ready-made message types, one per built-in framing.

* :class:`JSONMessage` — a JSON object (``.doc``, a dict) whose ``"UUID"``
  field (:attr:`JSONMessage.uuid_field`) holds the UUID in its canonical text
  form, as a Go struct with a ``UUID uuid.UUID`` field marshals it.
  Subclasses declare typed accessors with :class:`JSONField`::

      class Sum(message.JSONMessage):
          key = message.JSONField("Key", "")
          count = message.JSONField("Count", 0)

* :class:`CSVRecord` — a list of strings whose field 0 is the UUID (Gazette's
  ``message.CSVRecord``).
* :class:`ProtoMessage` — a protobuf message for the fixed framing, with
  the UUID's 16 bytes in one of its ``bytes`` fields (as Gazette's word-count
  ``NGramCount.uuid``)::

      class NGramCount(message.ProtoMessage[word_count_pb2.NGramCount]):
          proto_type = word_count_pb2.NGramCount
          uuid_field = "uuid"

Each acknowledgement is an empty message of the same type (for a CSVRecord:
as many empty fields), which the Publisher gives only a UUID.
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar, Generic, Self, TypeVar, overload

from google.protobuf import message as pb_message

from gazette.message import errors, json_framing, uuids

__all__ = ["CSVRecord", "JSONField", "JSONMessage", "ProtoMessage"]

T = TypeVar("T")
P = TypeVar("P", bound=pb_message.Message)


class JSONMessage:
    """A message that is a JSON object; ``doc`` is the object, its UUID under :attr:`uuid_field`."""

    __slots__ = ("_uuid", "_uuid_text", "doc")

    #: The document field which holds the UUID's text.
    uuid_field: ClassVar[str] = "UUID"

    def __init__(self, doc: dict[str, Any] | None = None) -> None:
        self.doc: dict[str, Any] = {} if doc is None else doc
        # The UUID parsed from the text object last seen in the document: the
        # Sequencer asks several times per message, and parsing is the costly part.
        self._uuid_text: object = None
        self._uuid = uuids.ZERO_UUID

    def get_uuid(self) -> uuid.UUID:
        text = self.doc.get(self.uuid_field)
        if text is self._uuid_text:
            return self._uuid
        if text is None:
            return uuids.ZERO_UUID
        if not isinstance(text, str):
            raise errors.InvalidUUID(f"{self.uuid_field} is not a string ({type(text).__name__})")
        u = uuids.parse_uuid(text)
        self._uuid_text, self._uuid = text, u
        return u

    def set_uuid(self, u: uuid.UUID) -> None:
        text = str(u)
        self.doc[self.uuid_field] = text
        self._uuid_text, self._uuid = text, u

    def new_acknowledgement(self, journal: str) -> Self:
        return type(self)()

    def marshal_json(self) -> bytes:
        return json_framing.encode_json(self.doc)

    def unmarshal_json(self, data: bytes) -> None:
        doc = json_framing.decode_json(data)
        if type(doc) is not dict:
            raise errors.FramingError(
                f"cannot unmarshal JSON {type(doc).__name__} into {type(self).__name__}"
            )
        self.doc = doc
        try:
            self.get_uuid()  # A bad UUID fails the frame, as it fails Go's decoding.
        except errors.InvalidUUID as e:
            raise errors.FramingError(f"{self.uuid_field}: {e}") from e

    def __eq__(self, other: object) -> bool:
        if type(other) is type(self):
            assert isinstance(other, JSONMessage)
            return self.doc == other.doc
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.doc!r})"


class JSONField(Generic[T]):
    """A typed accessor of one field of a :class:`JSONMessage` subclass's document.

    Reading an absent field gives ``default`` (share only immutable defaults).
    """

    __slots__ = ("default", "key", "name")

    def __init__(self, key: str, default: T) -> None:
        self.key = key
        self.default = default
        self.name = key

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> JSONField[T]: ...

    @overload
    def __get__(self, obj: JSONMessage, owner: type | None = None) -> T: ...

    def __get__(self, obj: JSONMessage | None, owner: type | None = None) -> T | JSONField[T]:
        if obj is None:
            return self
        value: T = obj.doc.get(self.key, self.default)
        return value

    def __set__(self, obj: JSONMessage, value: T) -> None:
        obj.doc[self.key] = value


class CSVRecord(list[str]):
    """A CSV record whose first field is the UUID's text (Gazette ``message.CSVRecord``)."""

    __slots__ = ()

    def get_uuid(self) -> uuid.UUID:
        if not self or not self[0]:
            return uuids.ZERO_UUID
        return uuids.parse_uuid(self[0])

    def set_uuid(self, u: uuid.UUID) -> None:
        if self:
            self[0] = str(u)
        else:
            self.append(str(u))

    def new_acknowledgement(self, journal: str) -> CSVRecord:
        return CSVRecord([""] * max(1, len(self)))

    def marshal_csv(self) -> list[str]:
        return list(self)

    def unmarshal_csv(self, fields: list[str]) -> None:
        if not fields:
            raise errors.FramingError("fields are empty")
        try:
            uuids.parse_uuid(fields[0])
        except errors.InvalidUUID as e:
            raise errors.FramingError(str(e)) from e
        self[:] = fields


class ProtoMessage(Generic[P]):
    """A protobuf message (``.proto``) for the fixed framing; subclass it per message type.

    Set :attr:`proto_type` to the generated class and :attr:`uuid_field` to
    the name of its ``bytes`` field that holds the UUID (16 bytes; empty
    means no UUID).
    """

    __slots__ = ("proto",)

    #: The generated protobuf class.
    proto_type: type[P]
    #: The ``bytes`` field which holds the UUID.
    uuid_field: ClassVar[str] = "uuid"

    def __init__(self, proto: P | None = None) -> None:
        self.proto: P = self.proto_type() if proto is None else proto

    def get_uuid(self) -> uuid.UUID:
        b: bytes = getattr(self.proto, self.uuid_field)
        if not b:
            return uuids.ZERO_UUID
        if len(b) != 16:
            raise errors.InvalidUUID(f"invalid UUID (got {len(b)} bytes)")
        return uuid.UUID(bytes=b)

    def set_uuid(self, u: uuid.UUID) -> None:
        setattr(self.proto, self.uuid_field, u.bytes)

    def new_acknowledgement(self, journal: str) -> Self:
        return type(self)()

    def marshal_proto(self) -> bytes:
        return self.proto.SerializeToString()

    def unmarshal_proto(self, data: bytes) -> None:
        try:
            self.proto.ParseFromString(data)
        except pb_message.DecodeError as e:
            raise errors.FramingError(f"unmarshal {self.proto_type.__name__}: {e}") from e
        try:
            self.get_uuid()
        except errors.InvalidUUID as e:
            raise errors.FramingError(f"{self.uuid_field}: {e}") from e

    def __eq__(self, other: object) -> bool:
        if type(other) is type(self):
            assert isinstance(other, ProtoMessage)
            return bool(self.proto == other.proto)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.proto!r})"
