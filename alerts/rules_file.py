"""Loading and validating alert rules files into ``rules.AlertConfig``.

Every problem names the file, the line, the field and what was expected. Each rule (and each
top-level section) is checked on its own, so ``agentlat alerts check`` lists the first
mistake of every rule at once. Receiver URLs may name environment variables (``${VAR}``),
substituted only where notifications are sent (``receivers.py``), so a file can be
checked and replayed without the secrets.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, TypeVar

from agentlat.alerts.rules import (
    BURN_MIN_SAMPLES,
    DEFAULT_BURN_WINDOWS,
    LABEL_NAME,
    METRIC_DIMENSIONS,
    RESERVED_LABELS,
    RULE_TYPES,
    SEVERITIES,
    AlertConfig,
    AlertRulesError,
    BurnRate,
    BurnWindow,
    Drift,
    Floor,
    Notify,
    Receiver,
    Rule,
    Silence,
    Spec,
    Threshold,
)
from agentlat.shared.measures import DEFAULT_MIN_SAMPLES, METRIC_NAMES, PERCENTILES, RATIO_METRICS, RATIO_MIN_SAMPLES
from agentlat.shared.yamlfile import (
    LATENCY_EXPECTED,
    NOTHING,
    SHARE_EXPECTED,
    FieldParser,
    Marked,
    latency_ms,
    load_yaml,
    read_file,
    share,
)

T = TypeVar("T")

TOP_LEVEL_KEYS = (
    "version", "evaluation_interval", "evaluation_delay", "dashboard_url", "min_samples",
    "notify", "receivers", "silences", "rules",
)  # fmt: skip
COMMON_RULE_KEYS = (
    "alert", "type", "metric", "by", "match", "for", "keep_firing_for", "min_samples",
    "labels", "annotations", "receivers",
)  # fmt: skip
RULE_KEYS = {
    "threshold": (*COMMON_RULE_KEYS, "severity", "percentile", "threshold", "window"),
    "drift": (*COMMON_RULE_KEYS, "severity", "percentile", "window", "baseline", "ratio", "floor"),
    "burn_rate": (*COMMON_RULE_KEYS, "slo", "windows"),
}
REQUIRED_RULE_KEYS = {
    "threshold": ("alert", "metric", "percentile", "threshold", "window"),
    "drift": ("alert", "metric", "window", "baseline", "ratio", "floor"),
    "burn_rate": ("alert", "metric", "slo"),
}
BASELINE_KEYS = ("windows", "weeks", "min_windows")
SLO_KEYS = ("objective", "threshold")
BURN_WINDOW_KEYS = ("long", "short", "factor", "severity")
NOTIFY_KEYS = ("group_by", "group_wait", "group_interval", "repeat_interval", "send_resolved")
RECEIVER_KEYS = ("type", "url", "timeout", "headers")
RECEIVER_TYPES = ("slack", "webhook")
SILENCE_KEYS = ("matchers", "starts", "ends", "comment")
# Every field name a rules file may use, for the documentation test.
ALL_FIELDS = tuple(
    dict.fromkeys(
        (*TOP_LEVEL_KEYS, *(k for keys in RULE_KEYS.values() for k in keys), *BASELINE_KEYS, *SLO_KEYS,
         *BURN_WINDOW_KEYS, *NOTIFY_KEYS, *RECEIVER_KEYS, *SILENCE_KEYS)
    )
)  # fmt: skip

_INTERVAL = re.compile(r"^\s*(\d+)\s*(s|m|h|d|w)\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")  # ${VAR} in receiver URLs and headers
_ALERT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.:-]*$")
INTERVAL_EXPECTED = "a duration such as '30s', '5m', '1h', '3d' or '1w'"
WINDOW_EXPECTED = "a duration in whole minutes such as '5m', '1h' or '3d'"


def load_rules(path: str | Path) -> AlertConfig:
    """Read and validate an alert rules file."""
    path = Path(path)
    text = read_file(path, AlertRulesError, "alert rules file", "examples/alerts.yaml is a complete one")
    return parse_rules(text, str(path))


def parse_rules(text: str, path: str = "<rules>") -> AlertConfig:
    """Validate alert rules YAML; ``path`` names it in error messages."""
    return _RulesParser(path).document(load_yaml(text, path, AlertRulesError))


def interval_seconds(raw: Any) -> int | None:
    """Seconds of ``'30s'``/``'5m'``/``'1h'``/``'3d'``/``'1w'`` (or the number 0); None if neither."""
    if raw == 0 and not isinstance(raw, bool):
        return 0
    match = _INTERVAL.match(raw) if isinstance(raw, str) else None
    return int(match.group(1)) * _UNITS[match.group(2)] if match else None


class _RulesParser(FieldParser):
    """Turns the loaded YAML into an ``AlertConfig``, collecting the first problem of each part."""

    def __init__(self, path: str) -> None:
        super().__init__(path, AlertRulesError)
        self.problems: list[str] = []

    def attempt(self, default: T, parse: Callable[..., T], *args: Any) -> T:
        try:
            return parse(*args)
        except AlertRulesError as exc:
            self.problems.append(str(exc))
            return default

    def document(self, doc: Any) -> AlertConfig:
        if doc is None:
            raise self.fail(1, "the file", "alert rules (examples/alerts.yaml is a complete file)")
        root = self.mapping(doc, 1, "the file", "a mapping with rules (and optionally receivers, notify, silences)")
        self.keys(root, TOP_LEVEL_KEYS, "")
        if root.get("version", 1) != 1:
            raise self.fail(root.lines["version"], "version", "1 (the format this agentlat reads)", root["version"])
        interval = self.attempt(60, self.interval, root, "evaluation_interval", 60, 1)
        delay = self.attempt(60, self.interval, root, "evaluation_delay", 60, 0)
        dashboard = self.attempt(None, self.url, root, "dashboard_url")
        minimums = self.attempt(dict(DEFAULT_MIN_SAMPLES), self._min_samples, root)
        notify = self.attempt(Notify(), self._notify, root)
        receivers = self.attempt((), self._receivers, root)
        silences = self.attempt((), self._silences, root)
        rules = self._rules(root, minimums, {r.name for r in receivers})
        if self.problems:
            raise AlertRulesError("\n".join(self.problems), tuple(self.problems))
        return AlertConfig(self.path, rules, receivers, notify, silences, interval, delay, dashboard)

    # --- scalars --------------------------------------------------------------------
    def interval(self, node: Marked, key: str, default: int, minimum: int, where: str = "") -> int:
        if key not in node:
            return default
        seconds = interval_seconds(node[key])
        if seconds is None or seconds < minimum:
            least = f" of at least {minimum} s" if minimum else ""
            raise self.fail(node.lines[key], f"{where}{key}", INTERVAL_EXPECTED + least, node[key])
        return seconds

    def window(self, node: Marked, key: str, where: str) -> int:
        seconds = interval_seconds(node[key])
        if seconds is None or seconds < 60 or seconds % 60:
            raise self.fail(node.lines[key], f"{where}{key}", WINDOW_EXPECTED, node[key])
        return seconds

    def latency(self, node: Marked, key: str, where: str, zero: bool = False) -> float:
        raw = node[key]
        if zero and raw == 0 and not isinstance(raw, bool):
            return 0.0
        ms = latency_ms(raw)
        if ms is None:
            raise self.fail(node.lines[key], f"{where}{key}", LATENCY_EXPECTED + (" (or 0)" if zero else ""), raw)
        return ms

    def url(self, node: Marked, key: str, where: str = "") -> str | None:
        if key not in node:
            return None
        value = self.text(node, key, where)
        if not ENV_REF.search(value) and not value.startswith(("http://", "https://")):
            raise self.fail(node.lines[key], f"{where}{key}", "an http:// or https:// URL, or ${VAR}", value)
        return value

    def instant(self, node: Marked, key: str, where: str) -> int:
        value = node[key]
        moment: datetime | None = None
        if isinstance(value, datetime):
            moment = value
        elif isinstance(value, date):
            moment = datetime(value.year, value.month, value.day)
        elif isinstance(value, str):
            try:
                moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                moment = None
        if moment is None:
            raise self.fail(node.lines[key], f"{where}{key}", "an ISO-8601 time such as 2026-12-24T18:00:00Z", value)
        return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp())

    def strings(self, node: Marked, key: str, where: str, names: re.Pattern[str] | None = None) -> dict[str, str]:
        """A mapping of names to scalar values (numbers become strings)."""
        here = f"{where}{key}"
        value = self.mapping(node[key], node.lines[key], here, "a mapping of names to values")
        out = {}
        for name, item in value.items():
            if not isinstance(name, str) or (names is not None and not names.match(name)):
                raise self.fail(value.lines[name], here, f"names matching {(names or LABEL_NAME).pattern}", name)
            if isinstance(item, bool) or not isinstance(item, str | int | float):
                raise self.fail(value.lines[name], f"{here}.{name}", "a string", item)
            out[name] = str(item)
        return out

    def names(self, node: Marked, key: str, where: str, allowed: tuple[str, ...] | None) -> tuple[str, ...]:
        value = node[key]
        expected = f"a list of names from {', '.join(allowed)}" if allowed else "a list of label names"
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise self.fail(node.lines[key], f"{where}{key}", expected, value)
        for item in items:
            if (allowed and item not in allowed) or not LABEL_NAME.match(item) or items.count(item) > 1:
                raise self.fail(node.lines[key], f"{where}{key}", expected + ", each once", item)
        return tuple(items)

    # --- sections -------------------------------------------------------------------
    def _min_samples(self, root: Marked) -> dict[str, int]:
        out = dict(DEFAULT_MIN_SAMPLES)
        if "min_samples" in root:
            node = self.mapping(root["min_samples"], root.lines["min_samples"], "min_samples", "p50/p95/p99 counts")
            self.keys(node, PERCENTILES, "min_samples.")
            out.update({pct: self.count(node, pct, "min_samples.") for pct in node})
        return out

    def _notify(self, root: Marked) -> Notify:
        if "notify" not in root:
            return Notify()
        node = self.mapping(root["notify"], root.lines["notify"], "notify", "a mapping of " + ", ".join(NOTIFY_KEYS))
        self.keys(node, NOTIFY_KEYS, "notify.")
        default = Notify()
        resolved = node.get("send_resolved", True)
        if not isinstance(resolved, bool):
            raise self.fail(node.lines["send_resolved"], "notify.send_resolved", "true or false", resolved)
        return Notify(
            group_by=self.names(node, "group_by", "notify.", None) if "group_by" in node else default.group_by,
            group_wait=self.interval(node, "group_wait", default.group_wait, 0, "notify."),
            group_interval=self.interval(node, "group_interval", default.group_interval, 0, "notify."),
            repeat_interval=self.interval(node, "repeat_interval", default.repeat_interval, 60, "notify."),
            send_resolved=resolved,
        )

    def _receivers(self, root: Marked) -> tuple[Receiver, ...]:
        if root.get("receivers") is None:
            return ()
        node = self.mapping(root["receivers"], root.lines["receivers"], "receivers", "a mapping of name to receiver")
        return tuple(self._receiver(name, value, node.lines[name]) for name, value in node.items())

    def _receiver(self, name: Any, value: Any, line: int) -> Receiver:
        if not isinstance(name, str) or not _ALERT_NAME.match(name):
            raise self.fail(line, "receivers", f"receiver names matching {_ALERT_NAME.pattern}", name)
        where = f"receivers.{name}."
        node = self.mapping(value, line, f"receivers.{name}", "a mapping with type and url")
        self.keys(node, RECEIVER_KEYS, where)
        for key in ("type", "url"):
            if key not in node:
                raise self.fail(node.line, f"{where}{key}", "a value (this field is required)")
        kind = node["type"]
        if kind not in RECEIVER_TYPES:
            raise self.fail(node.lines["type"], f"{where}type", " or ".join(RECEIVER_TYPES), kind)
        if "headers" in node and kind != "webhook":
            raise self.fail(node.lines["headers"], f"{where}headers", "headers only on a webhook receiver")
        timeout = 10.0
        if "timeout" in node:
            timeout = self.number(node, "timeout", where, "seconds from 0.1 to 60", lambda v: 0.1 <= v <= 60)
        headers = self.strings(node, "headers", where, re.compile(r"^[A-Za-z0-9-]+$")) if "headers" in node else {}
        return Receiver(name, kind, self.url(node, "url", where) or "", timeout, headers)

    def _silences(self, root: Marked) -> tuple[Silence, ...]:
        if root.get("silences") is None:
            return ()
        items = root["silences"]
        if not isinstance(items, list):
            raise self.fail(root.lines["silences"], "silences", "a list of silences", items)
        return tuple(self._silence(item, root.lines["silences"], f"silences[{i}]") for i, item in enumerate(items))

    def _silence(self, value: Any, line: int, where: str) -> Silence:
        node = self.mapping(value, line, where, "a mapping with matchers and ends")
        self.keys(node, SILENCE_KEYS, f"{where}.")
        for key in ("matchers", "ends"):
            if key not in node:
                raise self.fail(node.line, f"{where}.{key}", "a value (this field is required)")
        matchers = self.strings(node, "matchers", f"{where}.")
        if not matchers:
            raise self.fail(node.lines["matchers"], f"{where}.matchers", "at least one label: value matcher")
        ends = self.instant(node, "ends", f"{where}.")
        starts = self.instant(node, "starts", f"{where}.") if "starts" in node else None
        if starts is not None and starts >= ends:
            raise self.fail(node.lines["ends"], f"{where}.ends", "a time after starts", node["ends"])
        comment = str(node.get("comment") or "")
        return Silence(matchers, ends, starts, comment)

    def _rules(self, root: Marked, minimums: Mapping[str, int], receivers: set[str]) -> tuple[Rule, ...]:
        items = root.get("rules")
        if not isinstance(items, list) or not items:
            line = root.lines.get("rules", root.line)
            self.problems.append(str(self.fail(line, "rules", "a list of at least one rule", items or NOTHING)))
            return ()
        rules: list[Rule] = []
        seen: dict[str, int] = {}
        line = root.lines["rules"]
        for index, item in enumerate(items):
            for rule in self.attempt([], _RuleParser(self, minimums, receivers).rule, item, line, index):
                if rule.key in seen:
                    self.problems.append(
                        str(self.fail(rule.line, f"rules[{index}]", f"a rule that differs from the one on line "
                                      f"{seen[rule.key]} in alert, severity or match"))
                    )  # fmt: skip
                seen.setdefault(rule.key, rule.line)
                rules.append(rule)
        return tuple(rules)


class _RuleParser:
    """Validates one entry of ``rules`` (a burn-rate rule yields one ``Rule`` per severity)."""

    def __init__(self, parser: _RulesParser, minimums: Mapping[str, int], receivers: set[str]) -> None:
        self.p = parser
        self.minimums = minimums
        self.receivers = receivers

    def rule(self, value: Any, line: int, index: int) -> list[Rule]:
        p, where = self.p, f"rules[{index}]."
        node = p.mapping(value, line, where[:-1], "a mapping with alert, type, metric and the type's fields")
        kind = node.get("type")
        if kind not in RULE_TYPES:
            raise p.fail(node.lines.get("type", node.line), f"{where}type", " or ".join(RULE_TYPES), node.get("type"))
        p.keys(node, RULE_KEYS[kind], where)
        ratio = node.get("metric") in RATIO_METRICS
        for key in REQUIRED_RULE_KEYS[kind]:
            if key not in node and not (ratio and key == "percentile"):
                raise p.fail(node.line, f"{where}{key}", f"a value (required in a {kind} rule)")
        alert = p.text(node, "alert", where, _ALERT_NAME)
        metric = node["metric"]
        if metric not in METRIC_DIMENSIONS:
            raise p.fail(node.lines["metric"], f"{where}metric", f"one of {', '.join(METRIC_DIMENSIONS)}", metric)
        if ratio and kind != "threshold":
            expected = f"threshold (a {METRIC_NAMES[metric]} fires below its threshold)"
            raise p.fail(node.lines["type"], f"{where}type", expected, kind)
        by, match = self._dimensions(node, where, metric)
        labels = self._labels(node, where, (*by, *match))
        specs = self._specs(node, where, kind, ratio)
        receivers = p.names(node, "receivers", where, tuple(self.receivers)) if "receivers" in node else ()
        if "receivers" in node and not self.receivers:
            raise p.fail(node.lines["receivers"], f"{where}receivers", "receivers declared under receivers:")
        common = {
            "alert": alert, "metric": metric, "by": by, "match": match, "labels": labels, "receivers": receivers,
            "for_seconds": p.interval(node, "for", 0, 0, where),
            "keep_firing_for": p.interval(node, "keep_firing_for", 0, 0, where),
            "line": node.line,
        }  # fmt: skip
        known = {*RESERVED_LABELS, *by, *match, *labels}
        annotations = self._annotations(node, where, known) if "annotations" in node else {}
        return [Rule(severity=severity, spec=spec, min_samples=self._minimum(node, where, spec),
                     annotations=annotations, **common) for severity, spec in specs]  # fmt: skip

    def _share(self, node: Marked, key: str, where: str) -> float:
        """A ratio: 0.6 or "60%", from 0 to 1."""
        value = share(node[key])
        if value is None:
            raise self.p.fail(node.lines[key], f"{where}{key}", SHARE_EXPECTED, node[key])
        return value

    def _dimensions(self, node: Marked, where: str, metric: str) -> tuple[tuple[str, ...], dict[str, str]]:
        allowed = METRIC_DIMENSIONS[metric]
        by = self.p.names(node, "by", where, allowed) if "by" in node else ()
        match = self.p.strings(node, "match", where) if "match" in node else {}
        for name in match:
            if name not in allowed or name in by:
                expected = f"dimensions of {metric} ({', '.join(allowed)}) not also in by"
                raise self.p.fail(node["match"].lines[name], f"{where}match.{name}", expected)
        return by, match

    def _labels(self, node: Marked, where: str, taken: tuple[str, ...]) -> dict[str, str]:
        labels = self.p.strings(node, "labels", where) if "labels" in node else {}
        for name in labels:
            if name in RESERVED_LABELS or name in taken:
                expected = "labels other than alertname, severity and the rule's by/match dimensions"
                raise self.p.fail(node["labels"].lines[name], f"{where}labels.{name}", expected)
        return labels

    def _annotations(self, node: Marked, where: str, known: set[str]) -> dict[str, str]:
        annotations = self.p.strings(node, "annotations", where)
        for name, text in annotations.items():
            try:
                fields = {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}
            except ValueError:
                fields = {"{"}
            unknown = sorted(fields - known)
            if unknown:
                expected = f"placeholders naming the alert's labels ({', '.join(sorted(known))}); use {{{{ for a brace"
                raise self.p.fail(node["annotations"].lines[name], f"{where}annotations.{name}", expected, unknown[0])
        return annotations

    def _minimum(self, node: Marked, where: str, spec: Spec) -> int:
        if "min_samples" in node:
            return self.p.count(node, "min_samples", where)
        if isinstance(spec, BurnRate):
            return BURN_MIN_SAMPLES
        return RATIO_MIN_SAMPLES if isinstance(spec, Floor) else self.minimums[spec.percentile]

    def _specs(self, node: Marked, where: str, kind: str, ratio: bool) -> list[tuple[str, Spec]]:
        if kind == "burn_rate":
            burn = self._burn_rate(node, where)
            severities = [s for s in SEVERITIES if any(w.severity == s for w in burn.windows)]
            return [(s, BurnRate(burn.objective, burn.threshold_ms, tuple(w for w in burn.windows if w.severity == s)))
                    for s in severities]  # fmt: skip
        severity = node.get("severity", "warning")
        if severity not in SEVERITIES:
            raise self.p.fail(node.lines["severity"], f"{where}severity", " or ".join(SEVERITIES), severity)
        if ratio:
            if "percentile" in node:
                raise self.p.fail(node.lines["percentile"], f"{where}percentile", "none (a ratio has no percentiles)")
            return [(severity, Floor(self._share(node, "threshold", where), self.p.window(node, "window", where)))]
        percentile = node.get("percentile", "p99")
        if percentile not in PERCENTILES:
            raise self.p.fail(node.lines["percentile"], f"{where}percentile", " or ".join(PERCENTILES), percentile)
        window = self.p.window(node, "window", where)
        if kind == "threshold":
            return [(severity, Threshold(percentile, self.p.latency(node, "threshold", where), window))]
        return [(severity, self._drift(node, where, percentile, window))]

    def _drift(self, node: Marked, where: str, percentile: str, window: int) -> Drift:
        p = self.p
        ratio = p.number(node, "ratio", where, "a number above 1 (1.5: 50 % slower)", lambda v: 1 < v <= 1000)
        floor = p.latency(node, "floor", where, zero=True)
        here = f"{where}baseline"
        base = p.mapping(node["baseline"], node.lines["baseline"], here, "a mapping with windows: N or weeks: N")
        p.keys(base, BASELINE_KEYS, f"{here}.")
        if ("windows" in base) == ("weeks" in base):
            raise p.fail(base.line, here, "exactly one of windows (the last N windows) or weeks (the last N weeks)")
        windows = p.count(base, "windows", f"{here}.", 1, 1000) if "windows" in base else 0
        weeks = p.count(base, "weeks", f"{here}.", 1, 25) if "weeks" in base else 0
        least = math.ceil((windows or weeks) / 2)
        minimum = p.count(base, "min_windows", f"{here}.", 1, windows or weeks) if "min_windows" in base else least
        return Drift(percentile, window, ratio, floor, windows, weeks, minimum)

    def _burn_rate(self, node: Marked, where: str) -> BurnRate:
        p, here = self.p, f"{where}slo"
        slo = p.mapping(node["slo"], node.lines["slo"], here, "a mapping with objective and threshold")
        p.keys(slo, SLO_KEYS, f"{here}.")
        for key in SLO_KEYS:
            if key not in slo:
                raise p.fail(slo.line, f"{here}.{key}", "a value (this field is required)")
        objective = _objective(slo["objective"])
        if objective is None:
            expected = "a fraction (0.995) or a percentage ('99.5%') between 0 and 1"
            raise p.fail(slo.lines["objective"], f"{here}.objective", expected, slo["objective"])
        threshold = p.latency(slo, "threshold", f"{here}.")
        windows = DEFAULT_BURN_WINDOWS
        if "windows" in node:
            items = node["windows"]
            if not isinstance(items, list) or not items:
                raise p.fail(node.lines["windows"], f"{where}windows", "a list of long/short window pairs", items)
            windows = tuple(self._burn_window(i, node.lines["windows"], f"{where}windows[{n}]", objective)
                            for n, i in enumerate(items))  # fmt: skip
        return BurnRate(objective, threshold, windows)

    def _burn_window(self, value: Any, line: int, where: str, objective: float) -> BurnWindow:
        p = self.p
        node = p.mapping(value, line, where, "a mapping with long, short and factor")
        p.keys(node, BURN_WINDOW_KEYS, f"{where}.")
        for key in ("long", "short", "factor"):
            if key not in node:
                raise p.fail(node.line, f"{where}.{key}", "a value (this field is required)")
        long, short = p.window(node, "long", f"{where}."), p.window(node, "short", f"{where}.")
        if short >= long:
            raise p.fail(node.lines["short"], f"{where}.short", "a window shorter than long", node["short"])
        factor = p.number(node, "factor", f"{where}.", "a burn rate above 0 (14.4)", lambda v: v > 0)
        if factor * (1 - objective) > 1:
            expected = f"a factor of at most {1 / (1 - objective):g}: a higher rate needs more than every request slow"
            raise p.fail(node.lines["factor"], f"{where}.factor", expected, node["factor"])
        severity = node.get("severity", "critical")
        if severity not in SEVERITIES:
            raise p.fail(node.lines["severity"], f"{where}.severity", " or ".join(SEVERITIES), severity)
        return BurnWindow(long, short, factor, severity)


def _objective(raw: Any) -> float | None:
    """An SLO objective: a share strictly between 0 and 1 (0.995, '99.5%')."""
    value = share(raw)
    return value if value is not None and 0 < value < 1 else None
