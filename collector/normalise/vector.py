"""``normalise.derive`` for a batch of spans at once, column by column.

The OTLP decoder (``otlp_engine``) hands over a batch of spans as arrays: names, kinds, times, every
attribute key, and the values of the attributes the dialect tables name (``TABLE_KEYS``), the last of
each key per span, as a span's attribute dict holds it. ``derive_batch`` applies the same compiled
tables as ``derive`` (``normalise._COMPILED``: markers, roles, sources with their priorities and
converters) with numpy and Arrow, and returns the same derived columns and flags, in the same order.

What must be exactly Python's runs in Python, once per distinct value: a converter applied to a
string attribute, a role looked up from a kind attribute's text. A span whose dialect needs what the
tables do not say as data (a hook with no column-wise form in ``_EXTRA_FORMS``, JSON attributes, a
role rule) is derived by ``derive`` itself. ``tests/test_otlp_engine.py`` holds the two to the same
results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from agentlat import semconv as sc
from agentlat.collector.normalise import _COMPILED, _UNKNOWN, INNER_OF_MODEL_CALL, _Compiled, derive
from agentlat.collector.normalise import convert as convert
from agentlat.collector.normalise import dialect_hooks as hook
from agentlat.collector.normalise.dialects import NAME, SPAN_NAME, Dialect
from agentlat.collector.normalise.span import EventTimes
from agentlat.shared.columns import DERIVED_COLUMNS, DERIVED_DEFAULTS, DERIVED_NAMES

# Value kinds, as the engine reports an AnyValue's member (store/otlp_parse.py VALUE_KINDS).
NONE, STRING, BOOL, INT, DOUBLE, ARRAY, KVLIST, BYTES = range(8)
_ENTITIES = ("", "Tool", "Agent")  # what an @entity read means, by role (normalise._ENTITY_COLUMN)
_SERVER_TIMING = (
    (sc.GEN_AI_SERVER_TIME_TO_FIRST_TOKEN, "TtftMs"),
    (sc.GEN_AI_SERVER_TIME_PER_OUTPUT_TOKEN, "ItlMeanMs"),
)
_CHUNK_EVENTS = pa.array(["gen_ai.content.completion.chunk", "llm.content.completion.chunk"])
_DIALECTS = (*_COMPILED, _UNKNOWN)  # by rank; the last is no dialect
UNKNOWN = len(_COMPILED)


def _table_keys() -> tuple[str, ...]:
    keys: dict[str, None] = dict.fromkeys([INNER_OF_MODEL_CALL, *(key for key, _ in _SERVER_TIMING)])
    for compiled in _DIALECTS:
        dialect = compiled.dialect
        keys |= dict.fromkeys(dialect.markers) | dict.fromkeys(k for k in dialect.kind_keys if k != NAME)
        for reads in compiled.reads.values():
            keys |= dict.fromkeys(k for k in reads if k != SPAN_NAME)
    return tuple(keys)


TABLE_KEYS: tuple[str, ...] = _table_keys()  # every attribute a table reads or tests for
_KEY_ID = {key: number for number, key in enumerate(TABLE_KEYS)}


@dataclass(frozen=True, slots=True)
class TableValues:
    """The spans' values of ``TABLE_KEYS``: for each (span, key) the last one the span kept."""

    span: np.ndarray  # int64: the span's row
    key: np.ndarray  # int64: index in TABLE_KEYS
    kind: np.ndarray  # int8: NONE .. KVLIST (a BYTES value never comes here: otlp_engine)
    strings: pa.StringArray  # the text of a STRING value (truncated as stored), else ""
    ints: np.ndarray  # int64
    doubles: np.ndarray  # float64
    bools: np.ndarray  # bool


@dataclass(frozen=True, slots=True)
class Spans:
    """A batch of spans as ``derive_batch`` reads them; ``typed_attributes(rows)`` gives the attribute
    dicts ``derive`` takes, for the spans it derives one by one."""

    names: pa.StringArray
    kinds: pa.StringArray  # SpanKind names
    starts: np.ndarray  # uint64 unix ns
    ends: np.ndarray  # uint64 unix ns, never before the start
    keys: pa.StringArray  # every attribute key the spans kept, flattened
    key_spans: np.ndarray  # int64: the span of each key
    values: TableValues
    event_names: pa.ListArray  # per span
    event_times: pa.ListArray  # per span, uint64 unix ns
    typed_attributes: Callable[[np.ndarray], list[dict[str, object]]]

    def __len__(self) -> int:
        return len(self.names)


@dataclass(slots=True)
class Derived:
    """The derived columns and each span's derive flags as (row, order, flag), order as derive wrote them."""

    columns: dict[str, pa.Array]
    flags: list[tuple[int, int, str]]


# --- what runs column-wise ----------------------------------------------------------------------------
def _chunk_events_refused(spans: Spans, rows: np.ndarray) -> np.ndarray:
    """OpenLLMetry's ``chunk_events`` acts on spans with completion chunk events only: those go to derive."""
    names = spans.event_names.take(pa.array(rows))
    hits = np.asarray(pc.is_in(pc.list_flatten(names), _CHUNK_EVENTS), dtype=bool)
    refused = np.zeros(len(rows), dtype=bool)
    refused[np.asarray(pc.list_parent_indices(names))[hits]] = True
    return refused


def _nothing_refused(spans: Spans, rows: np.ndarray) -> np.ndarray:
    return np.zeros(len(rows), dtype=bool)


def _ttft_means_streamed(state: _State, rows: np.ndarray) -> None:
    """hook.ttft_means_streamed: a call with a TTFT was streamed."""
    state.put("Streaming", rows[state.columns["TtftMs"].valid[rows]], 1)


def _no_extra(state: _State, rows: np.ndarray) -> None:
    return None


# A dialect hook's column-wise form: (the spans it cannot take, what it does to the others).
_EXTRA_FORMS: dict[object, tuple[Callable[[Spans, np.ndarray], np.ndarray], Callable[[_State, np.ndarray], None]]] = {
    None: (_nothing_refused, _no_extra),
    hook.ttft_means_streamed: (_nothing_refused, _ttft_means_streamed),
    hook.chunk_events: (_chunk_events_refused, _no_extra),
}


def _columnwise(dialect: Dialect) -> bool:
    return not dialect.json_attrs and dialect.role_rule is None and dialect.extra in _EXTRA_FORMS


# --- the columns being built --------------------------------------------------------------------------
_UNTAKEN = 1 << 30
_FIRST = -1
_TYPES = {c.name: c.arrow_type for c in DERIVED_COLUMNS}


def _numpy_type(arrow_type: pa.DataType) -> type:
    if pa.types.is_floating(arrow_type):
        return np.float64
    return np.uint64 if pa.types.is_integer(arrow_type) else np.int64  # strings: pool indices


class _Pool:
    """The strings of the batch's string columns: the attribute texts, then constants by index."""

    def __init__(self, base: pa.StringArray) -> None:
        self.base = base
        self.extra: dict[str, int] = {}

    def index(self, text: str) -> int:
        return self.extra.setdefault(text, len(self.base) + len(self.extra))

    def array(self) -> pa.Array:
        return pa.concat_arrays([self.base, pa.array(list(self.extra), pa.string())])


@dataclass(slots=True)
class _Column:
    values: np.ndarray  # the value, or for a string column its index in the pool
    valid: np.ndarray  # bool: written
    taken: np.ndarray  # int64: priority of what wrote it (_UNTAKEN: nothing)
    is_text: bool


class _State:
    """The derived columns of a batch being built, and the derive flags found."""

    def __init__(self, spans: Spans, dialect: np.ndarray) -> None:
        count = len(spans)
        self.spans, self.dialect = spans, dialect
        self.lookups = _Lookups(spans)
        self.pool = _Pool(spans.values.strings)
        self.empty = self.pool.index("")  # the default of every text column
        self.role = np.full(count, self.pool.index(sc.ROLE_OTHER), dtype=np.int64)
        self.columns = {
            name: _Column(
                np.zeros(count, dtype=_numpy_type(_TYPES[name])),
                np.zeros(count, dtype=bool),
                np.full(count, _UNTAKEN, dtype=np.int64),
                pa.types.is_string(_TYPES[name]),
            )
            for name in DERIVED_NAMES
        }
        self.flags: list[tuple[int, int, str]] = []

    def put(self, column: str, rows: np.ndarray, value: object) -> None:
        """Out.put: ``value`` into ``column`` of the spans at ``rows`` that nothing wrote yet."""
        target = self.columns[column]
        rows = rows[target.taken[rows] == _UNTAKEN]
        target.values[rows] = self.pool.index(value) if target.is_text else value
        target.valid[rows] = True
        target.taken[rows] = _FIRST

    def flag(self, rows: np.ndarray, order: int, text: str) -> None:
        self.flags.extend((row, order, text) for row in rows.tolist())


# Order of a span's derive flags: role (by kind key), inner, reads (by priority), server timing, TTFT.
_ORDER_INNER, _ORDER_READS, _ORDER_SERVER, _ORDER_TTFT = 1_000, 2_000, 3_000_000, 4_000_000


# --- lookups of values by (span, key) -----------------------------------------------------------------
class _Lookups:
    """Where each span's value of a table key is, computed per key when first asked."""

    def __init__(self, spans: Spans) -> None:
        self.spans = spans
        self._rows: dict[str, np.ndarray] = {}

    def rows(self, key: str) -> np.ndarray:
        """Per span, the row of its value of ``key`` in ``spans.values`` (-1: none)."""
        if key not in self._rows:
            values = self.spans.values
            at = np.flatnonzero(values.key == _KEY_ID[key])
            rows = np.full(len(self.spans), -1, dtype=np.int64)
            rows[values.span[at]] = at
            self._rows[key] = rows
        return self._rows[key]

    def has_any(self, keys: Sequence[str]) -> np.ndarray:
        found = np.zeros(len(self.spans), dtype=bool)
        for key in keys:
            found |= self.rows(key) >= 0
        return found

    def key_prefix(self, prefix: str) -> np.ndarray:
        """Whether any attribute key of each span starts with ``prefix``."""
        hits = np.asarray(pc.starts_with(self.spans.keys, prefix), dtype=bool)
        found = np.zeros(len(self.spans), dtype=bool)
        found[self.spans.key_spans[hits]] = True
        return found


def _is_vllm(spans: Spans, lookups: _Lookups) -> np.ndarray:
    """hook.is_vllm, column-wise."""
    server = np.asarray(pc.equal(spans.kinds, "Server"), dtype=bool)
    named = np.asarray(pc.equal(spans.names, "llm_request"), dtype=bool)
    phases = (lookups.rows(sc.GEN_AI_OPERATION_NAME) < 0) & lookups.key_prefix("gen_ai.latency.")
    return server & (named | phases)


_DETECT_FORMS: dict[object, Callable[[Spans, _Lookups], np.ndarray]] = {hook.is_vllm: _is_vllm}


# --- converters ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Conversion:
    """A converter's column-wise form: ``scaled`` (durations), ``count`` (up to ``limit``), ``flag``, ``text``
    (a non-empty string), or ``python`` (the converter, on strings only: every other value is BAD to it)."""

    convert: Callable[[object], object]
    form: str
    factor: float = 1.0
    limit: int = 0


_CONVERSIONS = {
    id(c.convert): c
    for c in (
        _Conversion(convert.DURATIONS["s"], "scaled", factor=1e3),
        _Conversion(convert.DURATIONS["ms"], "scaled", factor=1.0),
        _Conversion(convert.DURATIONS["ns"], "scaled", factor=1e-6),
        _Conversion(convert.converter("InputTokens", "s"), "count", limit=2**64 - 1),
        _Conversion(convert.converter("StallCount", "s"), "count", limit=2**32 - 1),
        _Conversion(convert.as_flag, "flag"),
        _Conversion(convert.converter("Model", "s"), "text"),
        _Conversion(convert.converter("PrefetchOutcome", "s"), "python"),
    )
}
_BAD = convert.BAD


@dataclass(slots=True)
class _Converted:
    values: np.ndarray  # float64, uint64, int64, or pool indices for text
    good: np.ndarray  # bool: a value to write
    bad: np.ndarray | None  # bool: present but unusable (flagged)


def _convert(conversion: _Conversion, state: _State, at: np.ndarray) -> _Converted:
    """The converter applied to the values at rows ``at`` of the batch's table values."""
    values = state.spans.values
    kind = values.kind[at]
    is_string = kind == STRING
    if conversion.form in ("text", "python"):
        out = _Converted(np.zeros(len(at), dtype=np.int64), np.zeros(len(at), dtype=bool), ~is_string)
        if conversion.form == "text":  # the text itself; "" means not reported
            lengths = np.asarray(pc.binary_length(values.strings.take(pa.array(at))), dtype=np.int64)
            out.values, out.good = at.copy(), is_string & (lengths > 0)
            return out
        _convert_strings(conversion, state, at, is_string, out, np.int64)
        return out
    dtype = np.float64 if conversion.form == "scaled" else (np.uint64 if conversion.form == "count" else np.int64)
    out = _Converted(np.zeros(len(at), dtype=dtype), np.zeros(len(at), dtype=bool), np.ones(len(at), dtype=bool))
    _convert_numbers(conversion, values, at, kind, out)
    _convert_strings(conversion, state, at, is_string, out, dtype)
    return out


def _convert_strings(
    conversion: _Conversion, state: _State, at: np.ndarray, is_string: np.ndarray, out: _Converted, dtype: type
) -> None:
    """Strings through the Python converter itself, once per distinct string."""
    where = np.flatnonzero(is_string)
    if len(where) == 0:
        return
    texts = state.spans.values.strings.take(pa.array(at[where]))
    distinct = pc.unique(texts)
    results = [conversion.convert(text) for text in distinct.to_pylist()]
    which = np.asarray(pc.index_in(texts, distinct), dtype=np.int64)
    bad = np.asarray([r is _BAD for r in results], dtype=bool)
    good = np.asarray([r is not _BAD and r is not None for r in results], dtype=bool)
    if dtype is np.int64 and conversion.form == "python":
        converted = [state.pool.index(r) if isinstance(r, str) else 0 for r in results]
    else:
        converted = [r if good[i] else 0 for i, r in enumerate(results)]
    out.values[where] = np.asarray(converted, dtype=dtype)[which]
    out.good[where], out.bad[where] = good[which], bad[which]


def _convert_numbers(
    conversion: _Conversion, values: TableValues, at: np.ndarray, kind: np.ndarray, out: _Converted
) -> None:
    """INT, DOUBLE and BOOL values as the converter's Python form reads them (normalise_convert); values of
    other kinds stay BAD."""
    ints, doubles = values.ints[at], values.doubles[at]
    is_int, is_double, is_bool = kind == INT, kind == DOUBLE, kind == BOOL
    if conversion.form == "scaled":
        number = np.where(is_int, ints.astype(np.float64), doubles)
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = number * conversion.factor
            ok = np.isfinite(number) & (number >= 0) & np.isfinite(scaled)
        _settle(out, is_int | is_double, ok, scaled)
    elif conversion.form == "count":
        ok_int = is_int & (ints >= 0) & (ints <= min(conversion.limit, 2**63 - 1))
        with np.errstate(invalid="ignore"):
            whole = np.isfinite(doubles) & (doubles >= 0) & (np.floor(doubles) == doubles)
        # a double is compared to the limit as Python compares a float to an int: exactly
        ok_double = is_double & whole & (doubles < 2.0**64) & (doubles <= float(conversion.limit))
        counts = np.where(
            ok_double, np.where(ok_double, doubles, 0).astype(np.uint64), np.maximum(ints, 0).astype(np.uint64)
        )
        _settle(out, is_int | is_double, ok_int | ok_double, counts)
    elif conversion.form == "flag":
        ok = (is_int & ((ints == 0) | (ints == 1))) | is_bool
        _settle(out, is_int | is_bool, ok, np.where(is_bool, values.bools[at].astype(np.int64), ints))


def _settle(out: _Converted, applies: np.ndarray, ok: np.ndarray, results: np.ndarray) -> None:
    out.values[applies & ok] = results[applies & ok]
    out.good |= applies & ok
    out.bad &= ~applies | ~ok


# --- the derivation -----------------------------------------------------------------------------------
def derive_batch(spans: Spans) -> Derived:
    """``derive`` of every span of the batch (see the module docstring)."""
    state = _State(spans, np.zeros(0, dtype=np.int64))
    state.dialect = _dialects(spans, state.lookups)
    by_python = np.zeros(len(spans), dtype=bool)
    for rank in np.unique(state.dialect).tolist():
        rows = np.flatnonzero(state.dialect == rank)
        compiled = _DIALECTS[rank]
        if not _columnwise(compiled.dialect):
            by_python[rows] = True
            continue
        refused = _EXTRA_FORMS[compiled.dialect.extra][0](spans, rows)
        by_python[rows[refused]] = True
        _derive_dialect(state, compiled, rows[~refused])
    columnwise = np.flatnonzero(~by_python)
    _server_timing(state, columnwise)
    _defaults_and_ttft_check(state, columnwise)
    derived = _by_derive(Derived(_arrays(state), state.flags), spans, np.flatnonzero(by_python))
    derived.flags = _first_of_each(derived.flags)
    return derived


def _first_of_each(flags: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """A span's flags in order, each once (Out.flags is an ordered set)."""
    seen: set[tuple[int, str]] = set()
    kept = []
    for row, order, text in sorted(flags):
        if (row, text) not in seen:
            seen.add((row, text))
            kept.append((row, order, text))
    return kept


def _dialects(spans: Spans, lookups: _Lookups) -> np.ndarray:
    """The first dialect in DIALECTS order whose marker, name prefix, key prefix or detect rule matches."""
    dialect = np.full(len(spans), UNKNOWN, dtype=np.int64)
    for rank, compiled in enumerate(_COMPILED):
        d = compiled.dialect
        match = lookups.has_any(d.markers)
        for prefix in d.name_prefixes:
            match |= np.asarray(pc.starts_with(spans.names, prefix), dtype=bool)
        if d.key_prefix:
            match |= lookups.key_prefix(d.key_prefix)
        if d.detect is not None:
            match |= _DETECT_FORMS[d.detect](spans, lookups)
        dialect[(dialect == UNKNOWN) & match] = rank
    return dialect


def _derive_dialect(state: _State, compiled: _Compiled, rows: np.ndarray) -> None:
    """normalise._derive's steps for the spans of one dialect."""
    if len(rows) == 0:
        return
    dialect = compiled.dialect
    for column, value in dialect.fixed.items():
        state.put(column, rows, value)
    operations = _roles(state, compiled, rows)
    role = state.columns["Role"]
    open_rows = rows[role.taken[rows] == _UNTAKEN]
    role.values[open_rows], role.valid[open_rows], role.taken[open_rows] = state.role[open_rows], True, _FIRST
    inner = _read(state, rows, INNER_OF_MODEL_CALL, convert.as_flag, _ORDER_INNER)
    inner_rows = rows[inner.good & (inner.values == 1)]
    role.values[inner_rows] = state.pool.index(sc.ROLE_OTHER)  # only the column: reads follow the dialect's role
    state.put("Dialect", rows, dialect.name)
    for operation in np.unique(operations).tolist():
        if operation >= 0:
            target = state.columns["Operation"]
            chosen = rows[(operations == operation) & (target.taken[rows] == _UNTAKEN)]
            target.values[chosen], target.valid[chosen], target.taken[chosen] = operation, True, _FIRST
    _read_sources(state, compiled, rows)
    _EXTRA_FORMS[dialect.extra][1](state, rows)


def _roles(state: _State, compiled: _Compiled, rows: np.ndarray) -> np.ndarray:
    """normalise._role: sets the spans' roles; returns each one's operation (a pool index, -1: none)."""
    dialect = compiled.dialect
    operations = np.full(len(rows), -1, dtype=np.int64)
    if "Role" in dialect.fixed:
        state.role[rows] = state.pool.index(str(dialect.fixed["Role"]))
        return operations
    open_ = np.ones(len(rows), dtype=bool)
    for order, key in enumerate(dialect.kind_keys):
        if key == NAME:
            texts, has_text = state.spans.names.take(pa.array(rows)), np.ones(len(rows), dtype=bool)
        else:
            at = state.lookups.rows(key)[rows]
            kind = np.full(len(rows), NONE, dtype=np.int8)
            kind[at >= 0] = state.spans.values.kind[at[at >= 0]]
            wrong = open_ & (kind != STRING) & (kind != NONE)  # present, not text (absent reads as NONE)
            state.flag(rows[wrong], order, f"bad_attribute:{key}")
            has_text = kind == STRING
            texts = _texts_at(state.spans.values.strings, at, has_text)
        hit_role, hit_operation = _role_hits(state, compiled, texts)
        hits = open_ & has_text & (hit_role >= 0)
        state.role[rows[hits]] = hit_role[hits]
        operations[hits] = hit_operation[hits]
        open_ &= ~hits
    return operations


def _texts_at(strings: pa.StringArray, at: np.ndarray, where: np.ndarray) -> pa.StringArray:
    """The strings at rows ``at`` where ``where`` holds, "" elsewhere."""
    texts = np.full(len(at), None, dtype=object)
    picked = strings.take(pa.array(at[where])) if where.any() else pa.array([], pa.string())
    return pc.replace_with_mask(pa.array(texts, pa.string()), pa.array(where), picked)


def _role_hits(state: _State, compiled: _Compiled, texts: pa.StringArray) -> tuple[np.ndarray, np.ndarray]:
    """For each text, the role and operation (pool indices, -1: none) the dialect's role table gives it."""
    distinct = pc.unique(texts)
    roles, operations = [], []
    for text in distinct.to_pylist():
        value = (text or "").strip().lower()
        hit = compiled.dialect.roles.get(value) or next(
            (r for prefix, r in compiled.wildcards if value.startswith(prefix)), None
        )
        found = bool(value and hit)
        roles.append(state.pool.index(hit[0]) if found else -1)
        operations.append(state.pool.index(hit[1]) if found and hit[1] else -1)
    which = np.asarray(pc.index_in(texts, distinct), dtype=np.int64)
    return np.asarray(roles, dtype=np.int64)[which], np.asarray(operations, dtype=np.int64)[which]


def _read(state: _State, rows: np.ndarray, key: str, fn: Callable[[object], object], order: int) -> _Converted:
    """Out.read of one attribute for these spans; a BAD value is flagged."""
    at = state.lookups.rows(key)[rows]
    present = np.flatnonzero(at >= 0)
    converted = _convert(_CONVERSIONS[id(fn)], state, at[present])
    state.flag(rows[present[converted.bad]], order, f"bad_attribute:{key}")
    out = _Converted(np.zeros(len(rows), dtype=converted.values.dtype), np.zeros(len(rows), dtype=bool), None)
    out.values[present], out.good[present] = converted.values, converted.good
    return out


def _read_sources(state: _State, compiled: _Compiled, rows: np.ndarray) -> None:
    """normalise._read_sources: each column takes its best good value unless something wrote it first;
    every BAD value is flagged, in priority order."""
    entity_of = {state.pool.index(sc.ROLE_TOOL): 1, state.pool.index(sc.ROLE_AGENT): 2}
    entities = np.asarray([entity_of.get(role, 0) for role in state.role[rows].tolist()], dtype=np.int64)
    for entity in np.unique(entities).tolist():
        subset = rows[entities == entity]
        bad: list[tuple[int, int, str]] = []
        for attr, reads in compiled.reads[_ENTITIES[entity]].items():
            for priority, column, fn in reads:
                _apply_read(state, subset, attr, priority, column, fn, bad)
        for row, priority, attr in sorted(bad):
            state.flags.append((row, _ORDER_READS + priority, f"bad_attribute:{attr}"))


def _apply_read(
    state: _State, rows: np.ndarray, attr: str, priority: int, column: str, fn: Callable, bad: list
) -> None:
    if attr == SPAN_NAME:  # a span name is text: never BAD
        converted = _names_converted(state, rows, _CONVERSIONS[id(fn)])
        present = np.ones(len(rows), dtype=bool)
    else:
        at = state.lookups.rows(attr)[rows]
        present = at >= 0
        if not present.any():
            return
        converted = _convert(_CONVERSIONS[id(fn)], state, at[present])
        rows = rows[present]
    bad.extend((row, priority, attr) for row in rows[converted.bad].tolist())
    if column == "":
        return
    target = state.columns[column]
    write = converted.good & (target.taken[rows] > priority)
    chosen = rows[write]
    target.values[chosen], target.valid[chosen], target.taken[chosen] = converted.values[write], True, priority


def _names_converted(state: _State, rows: np.ndarray, conversion: _Conversion) -> _Converted:
    """A converter of a text column applied to span names (the @span.name virtual attribute)."""
    names = state.spans.names.take(pa.array(rows))
    distinct = pc.unique(names)
    results = [conversion.convert(name) for name in distinct.to_pylist()]
    which = np.asarray(pc.index_in(names, distinct), dtype=np.int64)
    good = np.asarray([r is not _BAD and r is not None for r in results], dtype=bool)[which]
    values = np.asarray([state.pool.index(r) if isinstance(r, str) else 0 for r in results], dtype=np.int64)[which]
    return _Converted(values, good, np.zeros(len(rows), dtype=bool))


def _server_timing(state: _State, rows: np.ndarray) -> None:
    """normalise._server_timing: GenAI's server metrics on streamed calls and server spans."""
    server = state.columns["IsServerSpan"]
    streaming = state.columns["Streaming"]
    on_server = server.valid[rows] & (server.values[rows] == 1)
    streamed = streaming.valid[rows] & (streaming.values[rows] == 1)
    for order, (attr, column) in enumerate(_SERVER_TIMING):
        target = state.columns[column]
        wanted = (on_server | streamed) if column == "TtftMs" else on_server
        subset = rows[wanted & (target.taken[rows] == _UNTAKEN)]
        converted = _read(state, subset, attr, convert.DURATIONS["s"], _ORDER_SERVER + order)
        chosen = subset[converted.good]
        target.values[chosen], target.valid[chosen], target.taken[chosen] = (
            converted.values[converted.good],
            True,
            _FIRST,
        )


def _defaults_and_ttft_check(state: _State, rows: np.ndarray) -> None:
    """Each dialect's defaults, then the flag of a TTFT longer than the span."""
    for rank in np.unique(state.dialect[rows]).tolist():
        subset = rows[state.dialect[rows] == rank]
        for column, value in _DIALECTS[rank].dialect.defaults.items():
            state.put(column, subset, value)
    ttft = state.columns["TtftMs"]
    lengths = state.spans.ends[rows] - state.spans.starts[rows]
    exact = lengths < 2**53  # as a float without rounding: the division rounds once, as Python's does
    durations = lengths.astype(np.float64) / 1_000_000
    check = ttft.valid[rows]
    over = check & exact & (ttft.values[rows] > durations + 1e-6)
    for i in np.flatnonzero(check & ~exact):
        over[i] = ttft.values[rows[i]] > int(lengths[i]) / 1_000_000 + 1e-6
    state.flag(rows[over], _ORDER_TTFT, "ttft_exceeds_duration")


def _arrays(state: _State) -> dict[str, pa.Array]:
    """The columns as Arrow arrays; what nothing wrote takes the column's default."""
    pool = state.pool.array()
    out = {}
    for name in DERIVED_NAMES:
        column, arrow_type = state.columns[name], _TYPES[name]
        if column.is_text:  # every text column's default is ""
            out[name] = pool.take(pa.array(np.where(column.valid, column.values, state.empty)))
        elif DERIVED_DEFAULTS[name] is None:
            out[name] = pa.array(column.values, mask=~column.valid).cast(arrow_type)
        else:
            out[name] = pa.array(np.where(column.valid, column.values, 0)).cast(arrow_type)
    return out


def _by_derive(derived: Derived, spans: Spans, rows: np.ndarray) -> Derived:
    """The spans at ``rows`` derived one by one by ``derive``, written over their rows."""
    if len(rows) == 0:
        return derived
    attributes = spans.typed_attributes(rows)
    take = pa.array(rows)
    names, kinds = spans.names.take(take).to_pylist(), spans.kinds.take(take).to_pylist()
    event_names, event_times = spans.event_names.take(take).to_pylist(), spans.event_times.take(take).to_pylist()
    values: dict[str, list[object]] = {name: [] for name in DERIVED_NAMES}
    for i, row in enumerate(rows.tolist()):
        events = EventTimes(event_names[i], event_times[i])
        out, flags = derive(names[i], kinds[i], int(spans.starts[row]), int(spans.ends[row]), attributes[i], events)
        for name in DERIVED_NAMES:
            values[name].append(out[name])
        derived.flags.extend((row, order, text) for order, text in enumerate(flags))
    mask = np.zeros(len(spans), dtype=bool)
    mask[rows] = True
    for name in DERIVED_NAMES:
        replacements = pa.array(values[name], _TYPES[name])
        derived.columns[name] = pc.replace_with_mask(derived.columns[name], pa.array(mask), replacements)
    return derived
