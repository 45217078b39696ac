"""Bytes of a user's text file -> str, or one Problem naming the line: a UTF-8 byte-order mark, or a byte that is not
UTF-8. Shared by the config loader and the key file, so both say the same thing with the line number."""

from __future__ import annotations

from hermes_stack.errors import Problem

BOM = b"\xef\xbb\xbf"


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
