"""MERGE's clauses, as Spark SQL writes them, and the SQL that evaluates them over a batch of rows.

A clause is text in Spark's words after ``WHEN MATCHED`` / ``WHEN NOT MATCHED`` / ``WHEN NOT MATCHED BY
SOURCE``, e.g. ``"AND s.op = 'D' THEN DELETE"``, ``"UPDATE SET *"``, ``"THEN UPDATE SET amount =
t.amount + s.amount"``, ``"INSERT *"``, ``"INSERT (id, amount) VALUES (s.id, s.amount)"``. Expressions
are DataFusion SQL over two row structs: ``t`` (the target row) and ``s`` (the source row); a side that is
absent is NULL, so ``s.x`` is NULL in a NOT MATCHED BY SOURCE clause. Clauses of a kind are tried in
order and the first whose condition is TRUE wins (NULL counts as false); a row no clause takes is left
as it is (MATCHED, NOT MATCHED BY SOURCE) or not inserted (NOT MATCHED), as in Spark.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

if TYPE_CHECKING:
    from pyiceberg.schema import Schema

__all__ = [
    "KIND",
    "MATCHED",
    "NOT_MATCHED",
    "NOT_MATCHED_BY_SOURCE",
    "Clause",
    "MergeClauses",
]

#: the hidden column of a batch that says which side(s) a row has
KIND = "__iceberg_exec_kind"
MATCHED, NOT_MATCHED_BY_SOURCE, NOT_MATCHED = 1, 2, 3
_CHOICE = "__iceberg_exec_clause"
# a reference to the target row (``t.x``, ``t."X"``), once string literals are blanked out
_TARGET_REF = re.compile(r"(?<![\w.\"])t\s*\.", re.IGNORECASE)
_QUOTED = re.compile(r"'(?:[^']|'')*'")

_CLAUSE_RE = re.compile(
    r"^\s*(?:AND\s+(?P<cond>.+?)\s+THEN\s+|THEN\s+)?(?P<action>(?:UPDATE|DELETE|INSERT)\b.*?)\s*$",
    re.IGNORECASE | re.DOTALL,
)
_UPDATE_RE = re.compile(r"^UPDATE\s+SET\s+(?P<set>.+)$", re.IGNORECASE | re.DOTALL)
_INSERT_RE = re.compile(
    r"^INSERT\s*(?:\((?P<cols>[^)]*)\)\s*VALUES\s*\((?P<vals>.*)\)|(?P<star>\*))\s*$",
    re.IGNORECASE | re.DOTALL,
)
_ASSIGN_RE = re.compile(
    r"^\s*(?:t\.)?(?P<col>[A-Za-z_][A-Za-z0-9_]*)\s*=(?!=)\s*(?P<expr>.+?)\s*$", re.DOTALL
)


@dataclass(frozen=True)
class Clause:
    """One WHEN clause: its kind, its condition (``None``: always), its action and the values it writes.

    :param kind: :data:`MATCHED`, :data:`NOT_MATCHED_BY_SOURCE` or :data:`NOT_MATCHED`.
    :param action: ``update``, ``delete`` or ``insert``.
    :param values: the SQL value of each table column it writes (updates: only the assigned columns;
        the others keep ``t.col``), by column name.
    :param text: the clause as given, for messages and documents.
    """

    kind: int
    condition: str | None
    action: str
    values: Mapping[str, str]
    text: str


def _split_top_level(text: str) -> list[str]:
    """Split at commas outside parentheses and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _parse_one(kind: int, text: str, columns: Sequence[str]) -> Clause:
    """Parse one clause of ``kind``; see the module docstring for the syntax."""
    where = {
        MATCHED: "WHEN MATCHED",
        NOT_MATCHED: "WHEN NOT MATCHED",
        NOT_MATCHED_BY_SOURCE: "WHEN NOT MATCHED BY SOURCE",
    }[kind]
    match = _CLAUSE_RE.match(text or "")
    if match is None:
        raise ConfigurationError(
            f"cannot parse {where} clause {text!r}; expected '[AND <condition> THEN] UPDATE SET ... | "
            "DELETE | INSERT ...'"
        )
    condition = (match.group("cond") or "").strip() or None
    action_text = match.group("action").strip()
    verb = action_text.split()[0].lower()
    allowed = ("insert",) if kind == NOT_MATCHED else ("update", "delete")
    if verb not in allowed:
        raise ConfigurationError(
            f"{where} allows only {' or '.join(a.upper() for a in allowed)}, got {text!r}"
        )
    if verb == "delete":
        if action_text.strip().lower() != "delete":
            raise ConfigurationError(f"cannot parse {where} clause {text!r}: DELETE takes nothing after it")
        return Clause(kind, condition, "delete", {}, text)
    if verb == "update":
        return Clause(kind, condition, "update", _assignments(where, text, action_text, columns, kind), text)
    return Clause(kind, condition, "insert", _insert_values(where, text, action_text, columns), text)


def _assignments(where: str, text: str, action: str, columns: Sequence[str], kind: int) -> dict[str, str]:
    match = _UPDATE_RE.match(action)
    if match is None:
        raise ConfigurationError(
            f"cannot parse {where} clause {text!r}: expected UPDATE SET * or SET col = expr"
        )
    body = match.group("set").strip()
    if body == "*":
        if kind != MATCHED:
            raise ConfigurationError(f"{where} cannot UPDATE SET *: there is no source row")
        return {c: f"s.{_quote(c)}" for c in columns}
    values: dict[str, str] = {}
    for part in _split_top_level(body):
        assign = _ASSIGN_RE.match(part)
        if assign is None or not assign.group("expr").strip():
            raise ConfigurationError(f"cannot parse assignment {part!r} in {where} clause {text!r}")
        name = assign.group("col")
        if name not in columns:
            raise ConfigurationError(
                f"cannot set {name!r}: not a top-level column of the table; columns: {', '.join(columns)}"
            )
        if name in values:
            raise ConfigurationError(f"Multiple assignments for '{name}' in {where} clause {text!r}")
        values[name] = assign.group("expr").strip()
    return values


def _insert_values(where: str, text: str, action: str, columns: Sequence[str]) -> dict[str, str]:
    match = _INSERT_RE.match(action)
    if match is None:
        raise ConfigurationError(
            f"cannot parse {where} clause {text!r}: expected INSERT * or INSERT (cols) VALUES (exprs)"
        )
    if match.group("star"):
        return {c: f"s.{_quote(c)}" for c in columns}
    names = _split_top_level(match.group("cols"))
    values = _split_top_level(match.group("vals"))
    if len(names) != len(values) or not all(names) or not all(values):
        raise ConfigurationError(f"{where} clause {text!r}: the columns and the values do not pair up")
    if unknown := [n for n in names if n not in columns]:
        raise ConfigurationError(
            f"cannot insert into {', '.join(unknown)}: not top-level columns of the table"
        )
    if len(set(names)) != len(names):
        raise ConfigurationError(f"{where} clause {text!r} names a column twice")
    return dict(zip(names, values, strict=True))


def _quote(name: str) -> str:
    return name if re.fullmatch(r"[a-z_][a-z0-9_]*", name) else '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class MergeClauses:
    """Every clause of one MERGE, in order, and the SQL that picks a clause and computes its row.

    Build with :meth:`parse`; documents carry :meth:`to_json`.
    """

    matched: tuple[Clause, ...]
    not_matched: tuple[Clause, ...]
    not_matched_by_source: tuple[Clause, ...]
    columns: tuple[str, ...]

    @classmethod
    def parse(
        cls,
        schema: Schema,
        *,
        when_matched: Sequence[str] = (),
        when_not_matched: Sequence[str] = (),
        when_not_matched_by_source: Sequence[str] = (),
    ) -> MergeClauses:
        """Parse and check the clauses against the table schema.

        :raises ConfigurationError: for a clause that does not parse, an unknown column, no clause at all,
            or an unconditional clause followed by another of its kind (it could never be reached).
        """
        columns = tuple(c.name for c in schema.columns)
        groups = []
        for kind, texts in (
            (MATCHED, when_matched),
            (NOT_MATCHED, when_not_matched),
            (NOT_MATCHED_BY_SOURCE, when_not_matched_by_source),
        ):
            if isinstance(texts, str):
                texts = [texts]
            parsed = tuple(_parse_one(kind, t, columns) for t in texts)
            for clause in parsed[:-1]:
                if clause.condition is None:
                    raise ConfigurationError(
                        f"clause {clause.text!r} has no condition, so the clauses after it can never apply; "
                        "put it last"
                    )
            groups.append(parsed)
        if not any(groups):
            raise ConfigurationError(
                "a MERGE needs at least one WHEN clause, e.g. when_matched=['UPDATE SET *']"
            )
        required = {c.name for c in schema.columns if c.required}
        for clause in groups[1]:
            if missing := sorted(required - set(clause.values)):
                raise ConfigurationError(
                    f"clause {clause.text!r} inserts no value for required column(s) {', '.join(missing)}"
                )
        return cls(groups[0], groups[1], groups[2], columns)

    @classmethod
    def from_json(cls, schema: Schema, doc: Mapping[str, Any]) -> MergeClauses:
        """The clauses a document carries (as :meth:`to_json` wrote them), parsed again."""
        return cls.parse(
            schema,
            when_matched=list(doc.get("when_matched") or []),
            when_not_matched=list(doc.get("when_not_matched") or []),
            when_not_matched_by_source=list(doc.get("when_not_matched_by_source") or []),
        )

    def to_json(self) -> dict[str, list[str]]:
        return {
            "when_matched": [c.text for c in self.matched],
            "when_not_matched": [c.text for c in self.not_matched],
            "when_not_matched_by_source": [c.text for c in self.not_matched_by_source],
        }

    @property
    def all(self) -> tuple[Clause, ...]:
        """Every clause, numbered 1.. in this order by :meth:`choice_sql`."""
        return (*self.matched, *self.not_matched_by_source, *self.not_matched)

    @property
    def reads_target_values(self) -> bool:
        """Whether a MATCHED or NOT MATCHED BY SOURCE clause reads a target column (``t.``): in a
        condition, a value, or a column an update keeps. Without, merge-on-read needs only the matched
        rows' positions, never the target files' rows."""
        if self.not_matched_by_source:
            return True
        for clause in self.matched:
            texts = [clause.condition or "", *clause.values.values()]
            if clause.action == "update" and set(clause.values) != set(self.columns):
                return True
            if any(_TARGET_REF.search(_QUOTED.sub("''", text)) for text in texts):
                return True
        return False

    def copies_source(self, clause: Clause) -> bool:
        """Whether ``clause`` writes every table column as the source's (``UPDATE SET *``, ``INSERT *``)."""
        return clause.action != "delete" and all(
            clause.values.get(c) == f"s.{_quote(c)}" for c in self.columns
        )

    @property
    def insert_only(self) -> bool:
        """Only NOT MATCHED clauses: a plain append, as Spark plans it."""
        return not self.matched and not self.not_matched_by_source

    @property
    def checks_cardinality(self) -> bool:
        """Spark's cardinality check runs unless the only MATCHED clause is an unconditional DELETE."""
        if not self.matched:
            return False
        only = self.matched[0]
        return not (len(self.matched) == 1 and only.action == "delete" and only.condition is None)

    def numbers(self, *actions: str) -> list[int]:
        """The numbers of the clauses with one of ``actions``."""
        return [n for n, c in enumerate(self.all, start=1) if c.action in actions]

    def choice_sql(self, table: str) -> str:
        """``SELECT`` the number of the clause each row of ``table`` takes (0: none)."""
        whens = [
            f"WHEN {KIND} = {c.kind}" + (f" AND ({c.condition})" if c.condition else "") + f" THEN {n}"
            for n, c in enumerate(self.all, start=1)
        ]
        return f'SELECT CASE {" ".join(whens)} ELSE 0 END AS "{_CHOICE}" FROM {table}'

    def output_sql(self, table: str, choices: Sequence[int]) -> str:
        """``SELECT`` the table row written by the clauses ``choices`` for the rows of ``table`` (with the
        chosen clause number in column ``__iceberg_exec_clause``) that took one of them."""
        chosen = [(n, self.all[n - 1]) for n in choices]
        exprs = []
        for column in self.columns:
            cases = " ".join(
                f"WHEN {n} THEN ({clause.values.get(column, self._default(clause, column))})"
                for n, clause in chosen
            )
            exprs.append(f'CASE "{_CHOICE}" {cases} END AS "{column}"')
        where = ", ".join(str(n) for n, _ in chosen)
        return f'SELECT {", ".join(exprs)} FROM {table} WHERE "{_CHOICE}" IN ({where})'

    @staticmethod
    def _default(clause: Clause, column: str) -> str:
        # An update keeps what it does not assign; an insert of some columns leaves the rest null.
        return f"t.{_quote(column)}" if clause.action == "update" else "NULL"


CHOICE = _CHOICE
