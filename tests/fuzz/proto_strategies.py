"""Hypothesis strategies for any protobuf message, built from its descriptor: every field may be
absent, extreme (nan, inf, the smallest float, the largest integers, long and odd unicode) or
ordinary, and nested messages recurse to a bounded depth. `interesting` lets a test pull chosen
fields toward values that reach deep code (a real model name, a small max_tokens)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

_INT32 = st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([0, 1, -1, 2**31 - 1]))
_INT64 = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, 1, -1, 2**63 - 1]))
_UINT32 = st.integers(0, 2**32 - 1)
_UINT64 = st.integers(0, 2**64 - 1)
_FLOAT = st.one_of(
    st.floats(width=32),
    st.sampled_from(
        [
            0.0,
            -0.0,
            1e-45,
            -1e-45,
            1e-38,
            3.4e38,
            float("inf"),
            float("-inf"),
            float("nan"),
            0.5,
            1.0,
            2.0,
            1e-5,
        ]
    ),
)
_DOUBLE = st.one_of(
    st.floats(), st.sampled_from([0.0, 5e-324, 1e308, float("inf"), float("nan"), -1.0, 0.25])
)
_TEXT = st.one_of(
    st.text(max_size=64),
    st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=2048),
    st.sampled_from(["", " ", "\x00", "\U0001f600" * 50, "a" * 5000]),
)
_BYTES = st.binary(max_size=256)

_SCALARS = {
    FieldDescriptor.TYPE_INT32: _INT32,
    FieldDescriptor.TYPE_SINT32: _INT32,
    FieldDescriptor.TYPE_SFIXED32: _INT32,
    FieldDescriptor.TYPE_INT64: _INT64,
    FieldDescriptor.TYPE_SINT64: _INT64,
    FieldDescriptor.TYPE_SFIXED64: _INT64,
    FieldDescriptor.TYPE_UINT32: _UINT32,
    FieldDescriptor.TYPE_FIXED32: _UINT32,
    FieldDescriptor.TYPE_UINT64: _UINT64,
    FieldDescriptor.TYPE_FIXED64: _UINT64,
    FieldDescriptor.TYPE_FLOAT: _FLOAT,
    FieldDescriptor.TYPE_DOUBLE: _DOUBLE,
    FieldDescriptor.TYPE_BOOL: st.booleans(),
    FieldDescriptor.TYPE_STRING: _TEXT,
    FieldDescriptor.TYPE_BYTES: _BYTES,
}


def _value(
    field: FieldDescriptor, depth: int, interesting: Mapping[str, st.SearchStrategy]
) -> st.SearchStrategy:
    if field.full_name in interesting:
        return interesting[field.full_name]
    if field.type == FieldDescriptor.TYPE_ENUM:
        numbers = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(numbers), st.integers(-5, 50))
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return messages(field.message_type, depth + 1, interesting)
    return _SCALARS[field.type]


def messages(
    descriptor: Descriptor,
    depth: int = 0,
    interesting: Mapping[str, st.SearchStrategy] | None = None,
) -> st.SearchStrategy[Message]:
    """Messages of `descriptor`'s type, nested at most 3 deep."""
    interesting = interesting or {}
    cls = _message_class(descriptor)
    if depth > 3:
        return st.just(cls())
    fields: dict[str, st.SearchStrategy] = {}
    for f in descriptor.fields:
        value = _value(f, depth, interesting)
        if f.is_repeated:
            if f.message_type is not None and f.message_type.GetOptions().map_entry:
                continue
            fields[f.name] = st.lists(value, max_size=6 if depth else 12)
        else:
            fields[f.name] = st.one_of(st.none(), value)
    return st.fixed_dictionaries(fields).map(lambda kw: _build(cls, kw))


def _build(cls: Callable[..., Message], kw: dict) -> Message:
    msg = cls()
    for name, value in kw.items():
        if value is None:
            continue
        field = msg.DESCRIPTOR.fields_by_name[name]
        if field.is_repeated:
            getattr(msg, name).extend(value)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            getattr(msg, name).CopyFrom(value)
        elif field.type == FieldDescriptor.TYPE_ENUM:
            try:
                setattr(msg, name, value)
            except ValueError:
                pass  # a closed enum refuses unknown numbers: leave it unset
        else:
            setattr(msg, name, value)
    return msg


def _message_class(descriptor: Descriptor):
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(descriptor)
