"""Daemon messages in the JSON form `overlapctl --json` prints
(client/core/proto_json.h): proto field names, every field present, enums by
name, 64-bit integers as numbers, unix-millisecond times also in RFC 3339."""
import datetime
from typing import Any, Dict, List, Optional

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

_WIDE_INTEGERS = {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64,
                  FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_FIXED64,
                  FieldDescriptor.TYPE_SFIXED64}


def _repeated(field: FieldDescriptor) -> bool:
    # protobuf 6 dropped FieldDescriptor.label for is_repeated.
    if hasattr(field, "is_repeated"):
        return bool(field.is_repeated)
    return bool(getattr(field, "label") == FieldDescriptor.LABEL_REPEATED)


def time_name(field: str) -> str:
    """submit_time_ms -> submit_time, last_xid_unix_ms -> last_xid_time; "" for others."""
    if field.endswith("_unix_ms"):
        return field[:-len("_unix_ms")] + "_time"
    if field.endswith("_time_ms"):
        return field[:-len("_ms")]
    return ""


def moment(unix_ms: int) -> Optional[datetime.datetime]:
    """A unix-millisecond time as an aware UTC datetime; None for 0 (not yet)."""
    if not unix_ms:
        return None
    return datetime.datetime.fromtimestamp(unix_ms / 1000, tz=datetime.timezone.utc)


def _rfc3339(unix_ms: int) -> Optional[str]:
    when = moment(unix_ms)
    if when is None:
        return None
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (unix_ms % 1000)


def _map_value(field: FieldDescriptor) -> Optional[FieldDescriptor]:
    message = field.message_type
    if message is None or not message.GetOptions().map_entry:
        return None
    value: FieldDescriptor = message.fields_by_name["value"]
    return value


def _numbers(descriptor: Any, value: Dict[str, Any]) -> None:
    for field in descriptor.fields:
        if field.name not in value:
            continue
        item = value[field.name]
        map_value = _map_value(field)
        if map_value is not None:
            for key in item:
                if map_value.message_type is not None:
                    _numbers(map_value.message_type, item[key])
                elif map_value.type in _WIDE_INTEGERS:
                    item[key] = int(item[key])
        elif field.message_type is not None:
            elements: List[Dict[str, Any]] = item if _repeated(field) else [item]
            for element in elements:
                _numbers(field.message_type, element)
        elif field.type in _WIDE_INTEGERS:
            if _repeated(field):
                value[field.name] = [int(v) for v in item]
            else:
                value[field.name] = int(item)
                name = time_name(field.name)
                if name and name not in value:
                    value[name] = _rfc3339(value[field.name])


def to_dict(message: Message) -> Dict[str, Any]:
    """The message as overlapctl --json prints it."""
    try:  # protobuf >= 5
        out: Dict[str, Any] = json_format.MessageToDict(
            message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    except TypeError:  # protobuf < 5
        out = json_format.MessageToDict(  # type: ignore[call-arg, unused-ignore]
            message, preserving_proto_field_name=True, including_default_value_fields=True)
    _numbers(message.DESCRIPTOR, out)
    return out
