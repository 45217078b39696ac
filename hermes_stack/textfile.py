"""Bytes of a user's text file -> str, or what is wrong with them and on which line, in one place.

- decode_text: the config files and the key file (strict: a UTF-8 byte-order mark or a byte that is not UTF-8 is one
  Problem naming the line), so both say the same thing.
- decode_source: environments/*.py and environments/requirements.txt, read as Python reads a source file and pip a
  requirements file (a byte-order mark skipped, a `coding:` line honoured).
- path_unusable, not_regular: what is wrong with a path before it is read (a name the system refuses; a pipe or a
  device, whose read would wait on a writer or never end), for the key file, the config files and the paths given
  on the command line, so all say the same thing.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import tokenize
from dataclasses import dataclass

from hermes_stack.errors import Problem

BOM = b"\xef\xbb\xbf"


def path_unusable(path: str | os.PathLike[str]) -> str | None:
    """"a path that cannot be read (File name too long)" when the system refuses the path itself (a name over 255
    bytes, a parent folder that cannot be searched); None when it can be looked at (absent is fine: the caller says
    so). pathlib's exists(), is_dir() and is_file() raise for such a path instead of answering."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return None
        return f"a path that cannot be read ({exc.strerror})"
    except ValueError:  # a NUL in the path
        return "a path that cannot be read (it holds a NUL character)"
    return None


_SPECIAL = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a named pipe"),
            (stat.S_ISSOCK, "a socket"))


def not_regular(path: str | os.PathLike[str]) -> str | None:
    """What `path` is when it exists but is no regular file (followed through symlinks): "a named pipe", "a character
    device" (a link to /dev/zero), …; None for a regular file, a folder or nothing. Reading such a file would wait on
    a writer or never end."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return next((label for test, label in _SPECIAL if test(mode)), "not a regular file")


# UTF-16 byte-order marks (Windows' "Unicode" and PowerShell 5's `>` write these): the file is readable as text, but
# not as UTF-8, and "retype that line" would not help. UTF-32's marks begin like UTF-16 LE's, so they are named too.
UTF_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
            (b"\xfe\xff", "UTF-16"))


def decode_text(name: str, data: bytes) -> tuple[str | None, Problem | None]:
    wide = next((label for mark, label in UTF_BOMS if data.startswith(mark)), None)
    if wide is not None:
        return None, Problem(f"{name}:1", "(file)", f"a {wide} file (its byte-order mark)", "UTF-8 text",
                             f'save it as "UTF-8" (not "Unicode"); `iconv -f {wide} -t UTF-8` converts it')
    if data.startswith(BOM):
        # tomllib says "invalid statement at 1:1", json "Unexpected UTF-8 BOM", dotenv reads a name with a BOM in it.
        return None, Problem(f"{name}:1", "(file)", "a UTF-8 byte-order mark (BOM) at the start",
                             "UTF-8 without a BOM", 'save the file as "UTF-8", not "UTF-8 with BOM"')
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return None, Problem(f"{name}:{line}", "(file)", f"a byte that is not UTF-8 (0x{data[exc.start]:02x})",
                             "UTF-8 text", "retype that line, or save the file as UTF-8")


@dataclass(frozen=True)
class SourceText:
    """A source file's text, and what is wrong with its bytes (found, expected, hint, line) when anything is."""

    text: str | None  # None: not text this reader can use (UTF-16, NUL bytes, an unusable coding line)
    line: int = 0
    found: str = ""  # what is wrong; "" when nothing is
    expected: str = ""
    hint: str = ""


def _looks_utf16(data: bytes) -> bool:
    """UTF-16 without a byte-order mark: mostly-ASCII text has a NUL in every other byte."""
    if len(data) < 4:
        return False
    odd, even = data[1::2], data[0::2]
    return max(odd.count(0) / len(odd), even.count(0) / len(even)) > 0.8


def decode_source(data: bytes, byte_hint: str, wide_boms: bool = False) -> SourceText:
    """Bytes -> text as Python reads a source file and pip a requirements file: a UTF-8 byte-order mark skipped, a
    `coding:` line (PEP 263) honoured, else UTF-8. A byte the encoding refuses gives the text with U+FFFD in its place
    and the byte's line (the rest of the file can still be read); UTF-16, a NUL byte or an encoding that is not a text
    encoding give no text. `wide_boms`: a UTF-16 or UTF-32 byte-order mark names the encoding, as pip reads a
    requirements file (Python refuses such a source file)."""
    wide = next((label for mark, label in UTF_BOMS if data.startswith(mark)), None)
    if wide is not None and wide_boms:
        try:
            return SourceText(data.decode(wide.lower()))  # "utf-16"/"utf-32": the mark gives the byte order
        except UnicodeDecodeError:
            pass  # a damaged file: named below like one without a mark
    if wide is None and b"\x00" in data and _looks_utf16(data):
        wide = "UTF-16"
    if wide is not None:  # Windows' "Unicode", PowerShell 5's `>`
        return SourceText(None, 1, f"{wide} text", "UTF-8 text",
                          f'save it as "UTF-8" (not "Unicode"); `iconv -f {wide} -t UTF-8` converts it')
    if b"\x00" in data:
        line = data.count(b"\n", 0, data.index(b"\x00")) + 1
        return SourceText(None, line, "a NUL byte (0x00)", "text without NUL bytes",
                          "the file is binary or damaged: save it again as UTF-8 text")
    unusable = ("UTF-8 text", "remove the `coding:` line and save the file as UTF-8")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        if "invalid or missing encoding declaration" not in str(exc):  # that one: a non-UTF-8 byte, named below
            return SourceText(None, 1, f"a coding line Python cannot use: {exc.msg}", *unusable)
        encoding = "utf-8"
    start = len(BOM) if data.startswith(BOM) else 0
    encoding = "utf-8" if encoding == "utf-8-sig" else encoding
    try:
        return SourceText(data[start:].decode(encoding))
    except UnicodeDecodeError as exc:
        at = start + exc.start
        label = "UTF-8" if encoding == "utf-8" else encoding
        found = f"a byte that is not {label} (0x{data[at]:02x})"
        try:
            return SourceText(data[start:].decode(encoding, errors="replace"), data.count(b"\n", 0, at) + 1, found,
                              f"{label} text", byte_hint)
        except (LookupError, UnicodeError):
            return SourceText(None, data.count(b"\n", 0, at) + 1, found, f"{label} text", byte_hint)
    except (LookupError, UnicodeError):  # `coding: hex`, rot13, punycode: codecs, but not text encodings
        return SourceText(None, 1, f"a coding line naming {encoding}, which is not a text encoding", *unusable)
