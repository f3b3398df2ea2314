"""Raw records of a data file, each with the line it starts on, for errors that name file and line.

Handles JSON Lines (`.jsonl`, `.jsonl.gz`), JSON (a top-level array, or an object holding the array under
`data` / `Data` / `questions`), and tab- or comma-separated files with a header row (`.tsv`, `.csv`).
Malformed JSON and short rows come back as `BadRecord` values instead of raising, so that a reader can
either stop with a clear message or skip and count them.

Hostile files get the same treatment, never a traceback: a line that is not UTF-8, JSON nested deeper than
Python's parser recurses, a record of more than `MAX_RECORD_CHARS` characters, a number of more digits than
Python converts (4300), a string that is no Unicode text (a lone UTF-16 surrogate written as `\ud800`: valid
JSON, but nothing can encode it, so it would stop a run later, when its episode is written, and again on every
resume), and text after the closing `]` of a JSON array are bad records naming their line and field; a
folder, a FIFO or a device given as the file, and a `.gz` file that is truncated or damaged, are errors
naming the file (and the line reached).
Lines are decoded one at a time so that a bad byte is reported with its line (a newline byte never occurs
inside a UTF-8 sequence, so this decodes exactly what decoding the whole file would).
"""

from __future__ import annotations

import csv
import errno
import gzip
import io
import json
import sys
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

# Keys under which a top-level JSON object keeps its list of records (SQuAD-style and TriviaQA's "Data").
WRAPPER_KEYS = ("data", "Data", "questions", "records")
# Rows allowed above the header of a TSV/CSV file before it is an error.
PREAMBLE_ROWS = 5
# Longest record accepted, in characters (a JSONL line, a record of a JSON array): questions and passages
# are far shorter; a 50 MB "question" is a broken or hostile file, and would reach the tokenizer whole.
MAX_RECORD_CHARS = 1_000_000


class RecordError(ValueError):
    """A record that does not fit its format; `str()` is `FILE:LINE: message`."""

    def __init__(self, path: str | Path, line: int, message: str):
        self.path, self.line, self.message = str(path), line, message
        super().__init__(f"{path}:{line}: {message}")


class FieldError(ValueError):
    """Raised by parsers for one bad field; the reader adds file and line (-> RecordError)."""

    def __init__(self, field: str, problem: str):
        self.field, self.problem = field, problem
        super().__init__(f"field '{field}' {problem}")


@dataclass(frozen=True)
class BadRecord:
    """A record that could not even be decoded (invalid JSON, a row that is not an object)."""

    message: str


class TextLines:
    """A file's lines as UTF-8 text (a leading BOM dropped), decoded one by one; `.gz` is decompressed.

    Iterating yields each line with its line ending. A line that is not UTF-8 raises RecordError naming
    it, unless `bad_lines` is true: then it comes back as a `BadRecord` (JSON Lines skip such a line)."""

    def __init__(self, path: str | Path, bad_lines: bool = False) -> None:
        self.path, self.bad_lines, self.line = str(path), bad_lines, 0
        p = Path(path)
        self._f: io.BufferedIOBase = gzip.open(p, "rb") if p.suffix == ".gz" else open(p, "rb")  # type: ignore[assignment]

    def __iter__(self) -> TextLines:
        return self

    def __next__(self) -> Any:
        try:
            raw = self._f.readline()
        except (EOFError, OSError, zlib.error) as e:  # a truncated or damaged .gz: nothing after it reads
            raise RecordError(
                self.path,
                self.line + 1,
                f"the compressed file is truncated or damaged ({e}); {self.line} lines were read before it",
            ) from None
        if not raw:
            raise StopIteration
        self.line += 1
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            message = (
                f"not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1}); "
                "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)"
            )
            if self.bad_lines:
                return BadRecord(message)
            raise RecordError(self.path, self.line, message) from None
        return text.removeprefix("\ufeff") if self.line == 1 else text

    def read(self) -> str:
        return "".join(self)

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> TextLines:
        return self

    def __exit__(self, t: type | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def open_text(path: str | Path, bad_lines: bool = False) -> TextLines:
    """Open a text file for reading as UTF-8 (see `TextLines`), transparently decompressing `.gz`."""
    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a folder; give the data file inside it", str(path))
    if not p.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if not p.is_file():  # a FIFO or a device (/dev/zero) would block or never end
        raise ValueError(f"{path}: not a regular file (a pipe or a device?); give a data file")
    return TextLines(p, bad_lines)


# Most digits of an integer in a data file: Python's own limit on converting text to int (4300 by default).
INT_DIGITS = min(4300, sys.get_int_max_str_digits() or 4300)


class _Ints:
    """`parse_int` for the json decoder: integers of more digits than Python converts become 0 and are
    remembered, so the record they sit in is reported bad (with its line) instead of the parser raising."""

    def __init__(self) -> None:
        self.longest = 0

    def __call__(self, literal: str) -> int:
        digits = len(literal.lstrip("-"))
        if digits > INT_DIGITS:
            self.longest = max(self.longest, digits)
            return 0
        return int(literal)

    def problem(self) -> str | None:
        """Why the last record is bad, if it held such a number (and forget it)."""
        longest, self.longest = self.longest, 0
        return f"a number of {longest} digits; at most {INT_DIGITS}" if longest else None


def unencodable_field(value: Any, where: str = "") -> str | None:
    """Why `value` (a decoded JSON value) holds text UTF-8 cannot encode, naming the field
    (`field 'question' is not Unicode text: a lone surrogate \\ud800 at character 5`); None when it holds
    none. Only JSON's `\\uD800`-style escapes make such strings (decoded UTF-8 never does), so readers
    call this only for records whose text has a `\\u` escape."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            char = f"\\u{ord(value[e.start]):04x}"
            name = f"field '{where}'" if where else "the record"
            return f"{name} is not Unicode text: a lone surrogate {char} at character {e.start + 1}"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            inner = f"{where}.{key}" if where else str(key)
            if problem := unencodable_field(key, inner) or unencodable_field(item, inner):
                return problem
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if problem := unencodable_field(item, f"{where}[{i}]"):
                return problem
    return None


def _text_problem(raw: str, rec: Any) -> str | None:
    """`unencodable_field(rec)` when the record's text has a `\\u` escape (the only way in), else None."""
    return unencodable_field(rec) if "\\u" in raw else None


def base_suffix(path: str | Path) -> str:
    """The file's extension without a trailing `.gz`: `a.jsonl.gz` -> `.jsonl`."""
    p = Path(path)
    if p.suffix == ".gz":
        p = p.with_suffix("")
    return p.suffix.lower()


def iter_records(
    path: str | Path, header_key: str = "question", quoted_tsv: bool = False, strict_rows: bool = False
) -> Iterator[tuple[int, dict[str, Any] | BadRecord]]:
    """Yield `(line, record)` for every record of the file; `record` is a dict or a `BadRecord`.

    In TSV/CSV files the header is the first row with a column named `header_key` (any case). CSV fields
    may be quoted; TSV fields only with `quoted_tsv` (DPR's passage TSV quotes, benchmark exports do not).
    `strict_rows` (passage files): a row with fewer cells than the header, or a quoted TSV field running
    over several lines (an unclosed quote swallowing the rows after it), is a bad record naming its lines.
    """
    suffix = base_suffix(path)
    if suffix in (".tsv", ".csv"):
        delimiter = "\t" if suffix == ".tsv" else ","
        yield from _iter_delimited(path, delimiter, header_key, quoted_tsv, strict_rows)
        return
    if _is_json_document(path):
        with open_text(path) as f:
            text = f.read()
        yield from _iter_json_document(path, text)
        return
    with open_text(path, bad_lines=True) as f:  # JSON Lines: streamed, so that corpora of millions fit
        yield from _iter_jsonl(f)


def _is_json_document(path: str | Path) -> bool:
    """Whether the file is one JSON value (an array, or an object wrapping the records), not JSON Lines."""
    with open_text(path, bad_lines=True) as f:
        first_line = ""
        for line in f:
            if isinstance(line, BadRecord):
                return False  # JSON Lines with a bad line: reported with its line by _iter_jsonl
            if line.strip():
                first_line = line.strip()
                break
    if first_line.startswith("["):
        return True
    if not first_line.startswith("{"):
        return False
    try:
        obj = json.loads(first_line, parse_int=_Ints())
    except json.JSONDecodeError:
        return True  # an object spread over several lines: a pretty-printed document
    except (RecursionError, ValueError):
        return False  # one whole (too deeply nested) object on the line: JSON Lines, reported there
    return isinstance(obj, dict) and any(isinstance(obj.get(k), list) for k in WRAPPER_KEYS)


def _iter_jsonl(lines: Iterable[str | BadRecord]) -> Iterator[tuple[int, dict[str, Any] | BadRecord]]:
    ints = _Ints()
    for n, line in enumerate(lines, start=1):
        if isinstance(line, BadRecord):
            yield n, line
            continue
        if not line.strip():
            continue
        if len(line) > MAX_RECORD_CHARS:
            yield n, BadRecord(f"a record of {len(line)} characters; at most {MAX_RECORD_CHARS}")
            continue
        try:
            rec = json.loads(line, parse_int=ints)
        except json.JSONDecodeError as e:
            ints.problem()
            yield n, BadRecord(f"not valid JSON ({e.msg} at column {e.colno})")
            continue
        except RecursionError:
            ints.problem()
            yield n, BadRecord("not valid JSON for a record: nested too deeply")
            continue
        if (problem := ints.problem()) or (problem := _text_problem(line, rec)):
            yield n, BadRecord(problem)
            continue
        yield (
            n,
            rec if isinstance(rec, dict) else BadRecord(f"expected a JSON object, got {type(rec).__name__}"),
        )


class _Scanner:
    """Walks a JSON document element by element so that each record keeps its starting line."""

    def __init__(self, text: str):
        self.text, self.pos, self.line, self._line_pos = text, 0, 1, 0
        self.ints = _Ints()
        self.decoder = json.JSONDecoder(parse_int=self.ints)

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
            self.pos += 1

    def line_at(self, pos: int) -> int:
        self.line += self.text.count("\n", self._line_pos, pos)
        self._line_pos = pos
        return self.line

    def expect(self, char: str) -> bool:
        self.skip_ws()
        if self.text.startswith(char, self.pos):
            self.pos += 1
            return True
        return False

    def value(self) -> Any:
        self.skip_ws()
        obj, self.pos = self.decoder.raw_decode(self.text, self.pos)
        return obj


def _iter_json_document(path: str | Path, text: str) -> Iterator[tuple[int, dict[str, Any] | BadRecord]]:
    sc = _Scanner(text)
    try:
        sc.skip_ws()
        if sc.expect("{"):
            if not _seek_wrapped_array(sc):
                raise RecordError(
                    path, 1, f"a JSON object without a list of records under any of {list(WRAPPER_KEYS)}"
                )
        elif not sc.expect("["):
            raise RecordError(path, 1, "expected a JSON array of records")
        if sc.expect("]"):
            yield from _after_array(path, sc)
            return
        while True:
            sc.skip_ws()
            start = sc.pos
            line = sc.line_at(start)
            sc.ints.problem()  # forget numbers outside the records (a wrapper object's other keys)
            try:
                rec = sc.value()
            except RecursionError:
                yield line, BadRecord("not valid JSON: nested too deeply; the rest of the file was not read")
                return
            problem = sc.ints.problem() or _text_problem(sc.text[start : sc.pos], rec)
            if problem:
                rec = BadRecord(problem)
            elif sc.pos - start > MAX_RECORD_CHARS:
                rec = BadRecord(f"a record of {sc.pos - start} characters; at most {MAX_RECORD_CHARS}")
            elif not isinstance(rec, dict):
                rec = BadRecord(f"expected a JSON object, got {type(rec).__name__}")
            yield line, rec
            if sc.expect(","):
                continue
            if sc.expect("]"):
                yield from _after_array(path, sc)
                return
            raise json.JSONDecodeError("expected ',' or ']' after a record", text, sc.pos)
    except json.JSONDecodeError as e:
        # The rest of the document cannot be located reliably: report it as one bad record and stop.
        yield (
            e.lineno,
            BadRecord(f"not valid JSON ({e.msg} at column {e.colno}); the rest of the file was not read"),
        )


def _after_array(path: str | Path, sc: _Scanner) -> Iterator[tuple[int, BadRecord]]:
    """Whatever follows the array of records: the closing brace of a wrapper object, then only whitespace.

    Why: text after the array (a second array, a truncated copy) means the file is not what it seems;
    reading the first array and saying nothing would drop the rest silently."""
    if sc.text.lstrip().startswith("{"):  # the array sat in a wrapper object: skip its other keys
        while sc.expect(","):
            sc.value()
            if not sc.expect(":"):
                raise json.JSONDecodeError("expected ':'", sc.text, sc.pos)
            sc.value()
        if not sc.expect("}"):
            raise json.JSONDecodeError("expected ',' or '}' after the list of records", sc.text, sc.pos)
    sc.skip_ws()
    if sc.pos < len(sc.text):
        tail = sc.text[sc.pos : sc.pos + 20]
        yield sc.line_at(sc.pos), BadRecord(f"unexpected text after the JSON document: {tail!r}")


def _seek_wrapped_array(sc: _Scanner) -> bool:
    """Inside a top-level object: move to the start of the array held by a wrapper key, if any."""
    if sc.expect("}"):
        return False
    while True:
        key = sc.value()
        if not sc.expect(":"):
            raise json.JSONDecodeError("expected ':'", sc.text, sc.pos)
        sc.skip_ws()
        if key in WRAPPER_KEYS and sc.text.startswith("[", sc.pos):
            sc.pos += 1
            return True
        sc.value()
        if sc.expect(","):
            continue
        return False


def _iter_delimited(
    path: str | Path, delimiter: str, header_key: str, quoted_tsv: bool, strict_rows: bool = False
) -> Iterator[tuple[int, dict[str, Any] | BadRecord]]:
    # TSV exports (Bamboogle, PopQA) do not quote fields; CSV files (FreshQA) do, and may hold newlines.
    quoting = csv.QUOTE_NONE if delimiter == "\t" and not quoted_tsv else csv.QUOTE_MINIMAL
    with open_text(path) as f:
        reader = csv.reader(f, delimiter=delimiter, quoting=quoting)
        try:
            yield from _delimited_rows(path, reader, header_key, strict_rows, one_line=delimiter == "\t")
        except csv.Error as e:  # e.g. a field over csv's size limit: a broken or hostile file
            raise RecordError(
                path, reader.line_num, f"not a valid {base_suffix(path)[1:].upper()} row: {e}"
            ) from None


def _delimited_rows(
    path: str | Path, reader: Any, header_key: str, strict_rows: bool = False, one_line: bool = False
) -> Iterator[tuple[int, dict[str, Any] | BadRecord]]:
    header: list[str] | None = None
    preamble: list[list[str]] = []
    last = 0  # the line the previous row ended on
    for row in reader:
        first, last = last + 1, reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        if header is None:
            # The header is the first row naming the key column (FreshQA's CSV has note rows above it).
            if any(c.strip().lower() == header_key for c in row):
                header = [h.strip() for h in row]
            elif len(preamble) < PREAMBLE_ROWS:
                preamble.append(row)
                continue
            else:
                raise RecordError(path, 1, f"no header row naming a {header_key!r} column")
            continue
        line = reader.line_num
        if strict_rows and one_line and line > first:
            yield (
                first,
                BadRecord(
                    f"a quoted field runs from line {first} to line {line} (an unclosed quote?); "
                    "a passage row is one line"
                ),
            )
            continue
        if len(row) > len(header) and any(c.strip() for c in row[len(header) :]):
            yield line, BadRecord(f"{len(row)} columns but the header has {len(header)}")
            continue
        if strict_rows and len(row) < len(header):
            yield (
                line,
                BadRecord(f"{len(row)} columns but the header has {len(header)} ({', '.join(header)})"),
            )
            continue
        rec: dict[str, Any] = {}
        for name, cell in zip(header, row):
            if name and name not in rec:  # unnamed spacer columns (Bamboogle's TSV) are dropped
                rec[name] = cell
        yield line, rec
