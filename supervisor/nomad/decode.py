"""Decoding Nomad's JSON into the typed models.

Rules, from Nomad's encoder: a missing key or ``null`` is the zero value (Nomad omits zero fields),
and an optional object that is ``null`` or empty is None; unknown keys are ignored; RFC 3339 strings
become aware datetimes and the zero time None. A value of the wrong type is a ValueError that names
its key, so that a bad event is skipped, not applied. Keys are derived from attribute names
(``eval_id`` -> ``EvalID``, ``modify_time_ns`` -> ``ModifyTime``); a model's ``raw`` field is the
whole object, from which its other parts are decoded on first read.

A cattrs converter, built once, decodes every model. The models of the event stream's hot path and
of a relist (Allocation and Job with their list stubs, Node, an allocation's resources) have
hand-written functions instead, registered on that converter: the same keys by the same rules, in
straight-line code, which is what keeps decoding a 2.5 KB allocation within a small factor of
parsing it. The tests hold them to the generated ones (``_make_converter(hand_written=False)``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final, NoReturn, Protocol, TypeVar, get_args, get_origin

import attrs
import cattrs
import orjson
from cattrs.gen import make_dict_structure_fn, override

from .models import (
    AllocatedResources,
    Allocation,
    AllocListStub,
    DrainStrategy,
    Evaluation,
    Event,
    EventBatch,
    EventPayload,
    Job,
    JobListStub,
    Node,
    NodeEvent,
    PortMapping,
    SharedResources,
    use_decoder,
)

__all__ = ["decode_batch", "nomad_key", "structure", "structure_lean_alloc_stubs", "structure_list"]

T = TypeVar("T")
Hook = Callable[[Any, Any], Any]


class Check(Protocol):
    """A structure hook of ours: the type argument cattrs passes is optional."""

    def __call__(self, value: Any, tp: Any = None, /) -> Any: ...


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
_SCALARS: Final = (str, int, bool)


def nomad_key(attribute: str) -> str:
    """Nomad's JSON key for a model attribute: ``failed_tg_allocs`` -> ``FailedTGAllocs``."""
    for suffix in _UNIT_SUFFIXES:
        if attribute.endswith(suffix):
            attribute = attribute[: -len(suffix)]
            break
    return "".join(_ACRONYMS.get(part, part.capitalize()) for part in attribute.split("_"))


def _wrong(value: Any, kind: type, key: str) -> NoReturn:
    raise ValueError(f"{key} must be {kind.__name__}, got {type(value).__name__}")


def _zero(value: Any, kind: type[T], key: str) -> T:
    """The zero value of ``kind`` for a null ``value``; any other value is of the wrong type."""
    if value is not None:
        _wrong(value, kind, key)
    return kind()


def _parse_time(value: Any, _: Any = None, *, key: str) -> datetime | None:
    if value is None:
        return None
    if type(value) is not str:
        _wrong(value, str, key)
    if value == "" or value.startswith(_ZERO_TIME_PREFIX):
        return None
    return datetime.fromisoformat(value)


# -- the generated decoders -----------------------------------------------------------------------


def _checked(converter: cattrs.Converter | None, key: str, tp: Any) -> Check:
    """The hook of a value of type ``tp`` found under ``key``; only a nested model needs the converter."""
    if tp in _SCALARS:

        def scalar(value: Any, _: Any = None) -> Any:
            return value if type(value) is tp else _zero(value, tp, key)

        return scalar
    if tp is Any:
        return _as_is
    if tp == datetime | None:
        return functools.partial(_parse_time, key=key)
    origin, args = get_origin(tp), get_args(tp)
    if origin is list:
        return _list_hook(converter, key, args[0])
    if origin is dict:
        return _dict_hook(converter, key, args[1])
    optional = type(None) in args
    model = next(a for a in args if a is not type(None)) if optional else tp
    if converter is None or not attrs.has(model):
        raise TypeError(f"no decoder for {tp!r}")
    hook = converter.get_structure_hook(model)

    def nested(value: Any, _: Any = None) -> Any:
        if type(value) is dict and (value or not optional):
            return hook(value, model)
        if value is not None and type(value) is not dict:
            _wrong(value, dict, key)
        return None if optional else model()

    return nested


def _as_is(value: Any, _: Any = None) -> Any:
    return value


def _list_hook(converter: cattrs.Converter | None, key: str, item_type: Any) -> Check:
    """A list whose items are all of their plain type is kept as it is."""
    item = _checked(converter, key, item_type)
    plain = item_type is Any or item_type in _SCALARS

    def items(value: Any, _: Any = None) -> list[Any]:
        if type(value) is not list:
            return _zero(value, list, key)
        if plain and (item_type is Any or all(type(v) is item_type for v in value)):
            return value
        return [item(v) for v in value]

    return items


def _dict_hook(converter: cattrs.Converter | None, key: str, value_type: Any) -> Check:
    """A map whose values are all of their plain type is kept as it is."""
    entry = _checked(converter, key, value_type)
    plain = value_type is Any or value_type in _SCALARS

    def entries(value: Any, _: Any = None) -> dict[str, Any]:
        if type(value) is not dict:
            return _zero(value, dict, key)
        if plain and (value_type is Any or all(type(v) is value_type for v in value.values())):
            return value
        return {k: entry(v) for k, v in value.items()}

    return entries


def _make_converter(*, hand_written: bool = True) -> cattrs.Converter:
    converter = cattrs.Converter(detailed_validation=False)

    def model_hook(cls: type[Any]) -> Hook:
        attrs.resolve_types(cls)
        overrides = {}
        for a in attrs.fields(cls):
            key = a.metadata.get("key") or nomad_key(a.name)
            checked = _checked(converter, key, a.type) if not a.metadata.get("raw") else None
            overrides[a.name] = override(rename=key, struct_hook=checked, omit=checked is None)
        hook = make_dict_structure_fn(cls, converter, **overrides)  # type: ignore[arg-type]
        if not any(a.metadata.get("raw") for a in attrs.fields(cls)):
            return hook
        return lambda value, _: attrs.evolve(hook(value, cls), raw=value)

    if hand_written:
        for model, hook in _HAND_WRITTEN.items():
            converter.register_structure_hook(model, hook)
    converter.register_structure_hook_factory(attrs.has, model_hook)
    return converter


# -- the hand-written decoders, in the models' field order ----------------------------------------


def _structure_allocation(data: Any, model: type[Any], raw: bool = True) -> Any:
    """An Allocation or an AllocListStub (``model``); without ``raw``, Nomad's whole object is not
    kept (the fields decoded on first read are then zero)."""
    if type(data) is not dict:
        data = _zero(data, dict, model.__name__)
    get = data.get
    id_ = get("ID", "")
    if type(id_) is not str:
        id_ = _zero(id_, str, "ID")
    job_id = get("JobID", "")
    if type(job_id) is not str:
        job_id = _zero(job_id, str, "JobID")
    node_id = get("NodeID", "")
    if type(node_id) is not str:
        node_id = _zero(node_id, str, "NodeID")
    desired_status = get("DesiredStatus", "")
    if type(desired_status) is not str:
        desired_status = _zero(desired_status, str, "DesiredStatus")
    desired_description = get("DesiredDescription", "")
    if type(desired_description) is not str:
        desired_description = _zero(desired_description, str, "DesiredDescription")
    client_status = get("ClientStatus", "")
    if type(client_status) is not str:
        client_status = _zero(client_status, str, "ClientStatus")
    next_allocation = get("NextAllocation", "")
    if type(next_allocation) is not str:
        next_allocation = _zero(next_allocation, str, "NextAllocation")
    resources = get("AllocatedResources")
    resources = None if resources is None or resources == {} else _structure_allocated_resources(resources)
    create_index = get("CreateIndex", 0)
    if type(create_index) is not int:
        create_index = _zero(create_index, int, "CreateIndex")
    modify_index = get("ModifyIndex", 0)
    if type(modify_index) is not int:
        modify_index = _zero(modify_index, int, "ModifyIndex")
    return model(
        id_,
        job_id,
        node_id,
        desired_status,
        desired_description,
        client_status,
        next_allocation,
        resources,
        create_index,
        modify_index,
        data if raw else {},
    )


def _flag(data: dict[str, Any], key: str) -> bool:
    value = data.get(key, False)
    return value if type(value) is bool else _zero(value, bool, key)


def _text(data: dict[str, Any], key: str) -> str:
    value = data.get(key, "")
    return value if type(value) is str else _zero(value, str, key)


def _number(data: dict[str, Any], key: str) -> int:
    value = data.get(key, 0)
    return value if type(value) is int else _zero(value, int, key)


def _structure_job(data: Any, _: Any = None) -> Job:
    if type(data) is not dict:
        data = _zero(data, dict, "Job")
    get = data.get
    return Job(
        _text(data, "ID"),
        _text(data, "Name"),
        _text(data, "Namespace"),
        _text(data, "Type"),
        _text(data, "Status"),
        _text(data, "StatusDescription"),
        _flag(data, "Stop"),
        _number(data, "Version"),
        _number(data, "Priority"),
        _DATACENTERS(get("Datacenters")),
        _META(get("Meta")),
        _TASK_GROUPS(get("TaskGroups")),
        _number(data, "CreateIndex"),
        _number(data, "ModifyIndex"),
        _number(data, "JobModifyIndex"),
        _number(data, "SubmitTime"),
    )


def _structure_job_stub(data: Any, _: Any = None) -> JobListStub:
    if type(data) is not dict:
        data = _zero(data, dict, "JobListStub")
    get = data.get
    return JobListStub(
        _text(data, "ID"),
        _text(data, "ParentID"),
        _text(data, "Name"),
        _text(data, "Namespace"),
        _text(data, "Type"),
        _number(data, "Priority"),
        _flag(data, "Stop"),
        _text(data, "Status"),
        _text(data, "StatusDescription"),
        _DATACENTERS(get("Datacenters")),
        _META(get("Meta")),
        _number(data, "CreateIndex"),
        _number(data, "ModifyIndex"),
        _number(data, "JobModifyIndex"),
        _number(data, "SubmitTime"),
    )


def _structure_node(data: Any, _: Any = None) -> Node:
    if type(data) is not dict:
        data = _zero(data, dict, "Node")
    get = data.get
    return Node(
        _text(data, "ID"),
        _text(data, "Name"),
        _text(data, "Datacenter"),
        _text(data, "NodePool"),
        _text(data, "NodeClass"),
        _text(data, "Status"),
        _text(data, "StatusDescription"),
        _text(data, "SchedulingEligibility"),
        _flag(data, "Drain"),
        _number(data, "CreateIndex"),
        _number(data, "ModifyIndex"),
        _text(data, "HTTPAddr"),
        _flag(data, "TLSEnabled"),
        _number(data, "StatusUpdatedAt"),
        _DRAIN_STRATEGY(get("DrainStrategy")),
        _ATTRIBUTES(get("Attributes")),
        _META(get("Meta")),
        _NODE_EVENTS(get("Events")),
    )


def _structure_allocated_resources(data: Any, _: Any = None) -> AllocatedResources:
    if type(data) is not dict:
        data = _zero(data, dict, "AllocatedResources")
    shared = data.get("Shared")
    if type(shared) is not dict:
        shared = _zero(shared, dict, "Shared")
    ports = shared.get("Ports")
    if type(ports) is not list:
        ports = _zero(ports, list, "Ports")
    return AllocatedResources(SharedResources([_structure_port(port) for port in ports]))


def _structure_port(data: Any) -> PortMapping:
    if type(data) is not dict:
        data = _zero(data, dict, "Ports")
    get = data.get
    label, value, to, host_ip = get("Label", ""), get("Value", 0), get("To", 0), get("HostIP", "")
    if type(label) is not str or type(value) is not int or type(to) is not int or type(host_ip) is not str:
        label, value, to = _text(data, "Label"), _number(data, "Value"), _number(data, "To")
        host_ip = _text(data, "HostIP")
    return PortMapping(label, value, to, host_ip)


_HAND_WRITTEN: Final[dict[type[Any], Hook]] = {
    Allocation: _structure_allocation,
    AllocListStub: _structure_allocation,
    Job: _structure_job,
    JobListStub: _structure_job_stub,
    Node: _structure_node,
    AllocatedResources: _structure_allocated_resources,
}
_converter: Final = _make_converter()
_DATACENTERS: Final = _checked(None, "Datacenters", list[str])
_META: Final = _checked(None, "Meta", dict[str, str])
_ATTRIBUTES: Final = _checked(None, "Attributes", dict[str, str])
_TASK_GROUPS: Final = _checked(None, "TaskGroups", list[dict[str, Any]])
_DRAIN_STRATEGY: Final = _checked(_converter, "DrainStrategy", DrainStrategy | None)
_NODE_EVENTS: Final = _checked(_converter, "Events", list[NodeEvent])


def structure(data: Mapping[str, Any], model: type[T]) -> T:
    """One Nomad object (already parsed JSON) as ``model``."""
    return _converter.structure(data, model)


@functools.cache
def _part_hook(tp: Any, key: str) -> Check:
    return _checked(_converter, key, tp)


def _structure_part(value: Any, tp: Any, key: str) -> Any:
    """A part of a model kept raw, decoded on first read."""
    return _part_hook(tp, key)(value, None)


use_decoder(_structure_part)


def structure_list(data: list[Mapping[str, Any]] | None, model: type[T]) -> list[T]:
    """A Nomad list answer; ``null`` is empty."""
    hook = _converter.get_structure_hook(model)
    return [hook(item, model) for item in data or ()]


def structure_lean_alloc_stubs(data: list[Mapping[str, Any]] | None) -> list[AllocListStub]:
    """Allocation stubs that keep only the fields decoded at once (what the pool reads), not Nomad's
    whole objects: a listing of 10,000 allocations would otherwise stay in memory as long as its
    stubs."""
    return [_structure_allocation(item, AllocListStub, raw=False) for item in data or ()]


# -- the event stream -----------------------------------------------------------------------------

_PAYLOADS: Final[dict[str, tuple[Hook, type[Any]]]] = {
    "Allocation": (_structure_allocation, Allocation),
    "Job": (_structure_job, Job),
    "Node": (_structure_node, Node),
    "Evaluation": (_checked(_converter, "Evaluation", Evaluation), Evaluation),
}


def _structure_event(data: Any) -> Event:
    if type(data) is not dict:
        raise ValueError(f"an event must be a JSON object, got {type(data).__name__}")
    get = data.get
    topic, kind = get("Topic"), get("Type")
    if type(topic) is not str or type(kind) is not str:
        for key, value in (("Topic", topic), ("Type", kind)):
            if value is not None:
                _zero(value, str, key)
        raise ValueError("an event needs a Topic and a Type")
    key = get("Key", "")
    if type(key) is not str:
        key = _zero(key, str, "Key")
    namespace = get("Namespace", "")
    if type(namespace) is not str:
        namespace = _zero(namespace, str, "Namespace")
    filter_keys = get("FilterKeys")
    if type(filter_keys) is not list:
        filter_keys = _zero(filter_keys, list, "FilterKeys")
    elif not all(type(k) is str for k in filter_keys):
        raise ValueError("FilterKeys must be strings")
    index = get("Index", 0)
    if type(index) is not int:
        index = _zero(index, int, "Index")
    payload: EventPayload = {}
    deleted = False
    raw = get("Payload")
    if type(raw) is not dict:
        _zero(raw, dict, "Payload")  # null: no payload
    elif raw:
        decoder = _PAYLOADS.get(topic)
        inner = raw.get(topic)
        payload = dict(raw) if decoder is None or inner is None else decoder[0](inner, decoder[1])
        deleted = bool(raw.get("Deleted", False))
    return Event(topic, kind, key, namespace, filter_keys, index, payload, deleted)


def decode_batch(line: bytes | str) -> EventBatch | None:
    """One line of the event stream: an EventBatch, or None for a ``{}`` heartbeat.

    Raises ValueError (orjson's JSONDecodeError is one) for text that is not JSON, and
    ValueError for JSON that is not an event batch.
    """
    data = orjson.loads(line)
    if type(data) is not dict:
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    events = data.get("Events")
    index = data.get("Index", 0)
    if not events and not index:
        return None
    if type(events) is not list or type(index) is not int or index < 0:
        raise ValueError("an event batch needs an Index (a raft index: 0 or more) and a list of Events")
    try:
        return EventBatch(index, [_structure_event(event) for event in events])
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed event in batch {index}: {exc!r}") from exc
