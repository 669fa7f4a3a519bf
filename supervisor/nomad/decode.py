"""Decoding Nomad's JSON into the typed models.

Rules, from Nomad's encoder: a missing key is the zero value; ``null`` for a list or a map is empty;
unknown keys are ignored; RFC 3339 strings become aware datetimes and the zero time None. Keys are
derived from attribute names (``eval_id`` -> ``EvalID``, ``modify_time_ns`` -> ``ModifyTime``).

The converter is built once; its generated functions touch only the modelled keys, which is what
keeps decoding a 2.5 KB allocation within a small factor of parsing it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final, TypeVar, get_args, get_origin

import attrs
import cattrs
import orjson
from cattrs.gen import make_dict_structure_fn, override

from .models import (
    Allocation,
    Evaluation,
    Event,
    EventBatch,
    EventPayload,
    Job,
    Node,
    use_decoder,
)

__all__ = ["decode_batch", "nomad_key", "structure", "structure_list"]

T = TypeVar("T")

_ACRONYMS: Final = {
    "id": "ID",
    "ids": "IDs",
    "ip": "IP",
    "mb": "MB",
    "tg": "TG",
    "http": "HTTP",
    "cpu": "CPU",
    "dns": "DNS",
    "tls": "TLS",
}
_UNIT_SUFFIXES: Final = ("_ns", "_s")
_ZERO_TIME_PREFIX: Final = "0001-01-01T00:00:00"
_PAYLOAD_MODELS: Final[dict[str, type[Any]]] = {
    "Allocation": Allocation,
    "Job": Job,
    "Node": Node,
    "Evaluation": Evaluation,
}


def nomad_key(attribute: str) -> str:
    """Nomad's JSON key for a model attribute: ``failed_tg_allocs`` -> ``FailedTGAllocs``."""
    for suffix in _UNIT_SUFFIXES:
        if attribute.endswith(suffix):
            attribute = attribute[: -len(suffix)]
            break
    return "".join(_ACRONYMS.get(part, part.capitalize()) for part in attribute.split("_"))


def _parse_time(value: Any, _: Any) -> datetime | None:
    if value is None or value == "" or value.startswith(_ZERO_TIME_PREFIX):
        return None
    return datetime.fromisoformat(value)


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(detailed_validation=False)

    # orjson already produced the right Python types; a call to str()/int() per field would be waste.
    for passthrough in (str, int, float):
        converter.register_structure_hook(passthrough, lambda value, _: value)
    converter.register_structure_hook(bool, lambda value, _: bool(value))
    converter.register_structure_hook(Any, lambda value, _: value)
    converter.register_structure_hook(datetime | None, _parse_time)

    def is_list(tp: Any) -> bool:
        return get_origin(tp) is list

    def list_hook(tp: Any) -> Callable[[Any, Any], list[Any]]:
        (item_type,) = get_args(tp)
        if item_type in (str, int, Any):
            return lambda value, _: value or []
        item_hook = converter.get_structure_hook(item_type)
        return lambda value, _: [item_hook(item, item_type) for item in value] if value else []

    def is_dict(tp: Any) -> bool:
        return get_origin(tp) is dict

    def dict_hook(tp: Any) -> Callable[[Any, Any], dict[str, Any]]:
        _, value_type = get_args(tp)
        if value_type in (str, Any):
            return lambda value, _: value or {}
        value_hook = converter.get_structure_hook(value_type)
        return lambda value, _: {k: value_hook(v, value_type) for k, v in value.items()} if value else {}

    def is_optional_model(tp: Any) -> bool:
        args = get_args(tp)
        return len(args) == 2 and type(None) in args and any(attrs.has(a) for a in args)

    def optional_model_hook(tp: Any) -> Callable[[Any, Any], Any]:
        model = next(a for a in get_args(tp) if attrs.has(a))
        hook = converter.get_structure_hook(model)
        return lambda value, _: None if value is None else hook(value, model)

    def model_hook(cls: type[Any]) -> Callable[[Any, Any], Any]:
        renames = {
            a.name: override(rename=a.metadata.get("key") or nomad_key(a.name)) for a in attrs.fields(cls)
        }
        return make_dict_structure_fn(cls, converter, **renames)  # type: ignore[arg-type]

    converter.register_structure_hook_factory(is_list, list_hook)
    converter.register_structure_hook_factory(is_dict, dict_hook)
    converter.register_structure_hook_factory(is_optional_model, optional_model_hook)
    converter.register_structure_hook_factory(attrs.has, model_hook)
    return converter


_converter: Final = _make_converter()


def structure(data: Mapping[str, Any], model: type[T]) -> T:
    """One Nomad object (already parsed JSON) as ``model``."""
    return _converter.structure(data, model)


use_decoder(structure)


def structure_list(data: list[Mapping[str, Any]] | None, model: type[T]) -> list[T]:
    """A Nomad list answer; ``null`` is empty."""
    hook = _converter.get_structure_hook(model)
    return [hook(item, model) for item in data or ()]


def _structure_payload(topic: str, payload: Mapping[str, Any] | None) -> tuple[EventPayload, bool]:
    if not payload:
        return {}, False
    model = _PAYLOAD_MODELS.get(topic)
    inner = payload.get(topic)
    if model is None or inner is None:
        return dict(payload), bool(payload.get("Deleted", False))
    return _converter.structure(inner, model), bool(payload.get("Deleted", False))


def _field(data: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    """``data[key]`` if it is a ``kind`` (never a bool for int); missing or null is ``default``."""
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{key} must be {kind.__name__}, got {type(value).__name__}")
    return value


def _structure_event(data: Mapping[str, Any]) -> Event:
    if not isinstance(data, Mapping):
        raise ValueError(f"an event must be a JSON object, got {type(data).__name__}")
    topic = _field(data, "Topic", str, None)
    kind = _field(data, "Type", str, None)
    if topic is None or kind is None:
        raise ValueError("an event needs a Topic and a Type")
    filter_keys = _field(data, "FilterKeys", list, [])
    if not all(isinstance(key, str) for key in filter_keys):
        raise ValueError("FilterKeys must be strings")
    payload, deleted = _structure_payload(topic, _field(data, "Payload", dict, None))
    return Event(
        topic=topic,
        type=kind,
        key=_field(data, "Key", str, ""),
        namespace=_field(data, "Namespace", str, ""),
        filter_keys=filter_keys,
        index=_field(data, "Index", int, 0),
        payload=payload,
        deleted=deleted,
    )


def decode_batch(line: bytes | str) -> EventBatch | None:
    """One line of the event stream: an EventBatch, or None for a ``{}`` heartbeat.

    Raises ValueError (orjson's JSONDecodeError is one) for text that is not JSON, and
    ValueError for JSON that is not an event batch.
    """
    data = orjson.loads(line)
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    events = data.get("Events")
    index = data.get("Index", 0)
    if not events and not index:
        return None
    if not isinstance(events, list) or not isinstance(index, int) or isinstance(index, bool):
        raise ValueError("an event batch needs an integer Index and a list of Events")
    try:
        return EventBatch(index=index, events=[_structure_event(event) for event in events])
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed event in batch {index}: {exc!r}") from exc
