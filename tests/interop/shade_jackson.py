"""Build the relocated ("shaded") Jackson jar that the Iceberg Spark runtime jar of the PyPI package
snowpark-connect-deps-iceberg needs but does not ship.

The upstream iceberg-spark-runtime jar bundles Jackson relocated to
``org.apache.iceberg.shaded.com.fasterxml.jackson``; the repackaged jar in snowpark-connect-deps-iceberg
1.0.3 references those classes but leaves them out (``NoClassDefFoundError:
org/apache/iceberg/shaded/com/fasterxml/jackson/core/JsonFactoryBuilder`` on the first metadata write).
This module recreates them from the unshaded Jackson jars that PySpark ships (jackson-core, -databind,
-annotations, -datatype-jsr310 2.15.2 in ``pyspark/jars``) by rewriting class names in the class-file
constant pools, which is what maven-shade's relocation does.

Copied from /work/shared/tools/shade_jackson.py (the logic is unchanged), plus a cache:
:func:`shaded_jackson_jar` builds the jar once per set of input jars. Also runnable as a script::

    python -m tests.interop.shade_jackson OUTPUT_JAR [JACKSON_JAR ...]   (default: pyspark's jars)
"""

from __future__ import annotations

import hashlib
import os
import struct
import sys
import tempfile
import zipfile
from pathlib import Path

SRC_SLASH = b"com/fasterxml/jackson/"
DST_SLASH = b"org/apache/iceberg/shaded/com/fasterxml/jackson/"
SRC_DOT = b"com.fasterxml.jackson."
DST_DOT = b"org.apache.iceberg.shaded.com.fasterxml.jackson."

# Bump when the output of build() changes, so that cached jars are rebuilt.
BUILD_VERSION = "1"

# Byte size of each constant-pool entry that is not CONSTANT_Utf8 (tag 1), tag included.
_CP_SIZES = {
    3: 5,
    4: 5,
    5: 9,
    6: 9,
    7: 3,
    8: 3,
    9: 5,
    10: 5,
    11: 5,
    12: 5,
    15: 4,
    16: 3,
    17: 5,
    18: 5,
    19: 3,
    20: 3,
}


def _reloc_bytes(b: bytes) -> bytes:
    # guard against double relocation
    if DST_SLASH in b or DST_DOT in b:
        return b
    return b.replace(SRC_SLASH, DST_SLASH).replace(SRC_DOT, DST_DOT)


def relocate_class(data: bytes) -> bytes:
    """Rewrite every CONSTANT_Utf8 entry of a class file; the constant pool is index-addressed, so
    entry lengths may change freely."""
    if data[:4] != b"\xca\xfe\xba\xbe":
        raise ValueError("not a class file")
    out = bytearray(data[:10])
    count = struct.unpack(">H", data[8:10])[0]
    i, idx = 10, 1
    while idx < count:
        tag = data[i]
        if tag == 1:
            ln = struct.unpack(">H", data[i + 1 : i + 3])[0]
            s = _reloc_bytes(data[i + 3 : i + 3 + ln])
            out += bytes([1]) + struct.pack(">H", len(s)) + s
            i += 3 + ln
        else:
            size = _CP_SIZES[tag]
            out += data[i : i + size]
            i += size
            if tag in (5, 6):  # long and double take two constant-pool slots
                idx += 1
        idx += 1
    out += data[i:]
    return bytes(out)


def default_inputs() -> list[Path]:
    """PySpark's own Jackson jars."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    found = []
    for stem in ("jackson-annotations-", "jackson-core-2", "jackson-databind-", "jackson-datatype-jsr310-"):
        c = sorted(jars.glob(stem + "*.jar"))
        if not c:
            raise FileNotFoundError(f"{stem}*.jar not found in {jars}")
        found.append(c[-1])
    return found


def build(output: Path, inputs: list[Path]) -> None:
    """Write the relocated jar to ``output`` (atomically: a temporary file in the same directory, then
    a rename, so that concurrent builders never see a half-written jar)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=output.name + ".", suffix=".tmp", dir=output.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    seen = set()
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
            zout.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: shade_jackson.py\n")
            for jar in inputs:
                with zipfile.ZipFile(jar) as zin:
                    for info in zin.infolist():
                        n = info.filename
                        if (
                            info.is_dir()
                            or n.startswith("META-INF/versions/")
                            or n.endswith("module-info.class")
                        ):
                            continue
                        if n.startswith("META-INF/") and not n.startswith("META-INF/services/"):
                            if n.upper().endswith((".SF", ".RSA", ".DSA", "MANIFEST.MF")):
                                continue
                            n = f"META-INF/{jar.stem}/{n[len('META-INF/') :]}"  # keep LICENSE/NOTICE apart
                        data = zin.read(info.filename)
                        if n.endswith(".class"):
                            data = relocate_class(data)
                            n = _reloc_bytes(n.encode()).decode()
                        elif n.startswith("META-INF/services/"):
                            n = _reloc_bytes(n.encode()).decode()
                            data = _reloc_bytes(data)
                        if n in seen:
                            continue
                        seen.add(n)
                        zout.writestr(n, data)
        tmp.replace(output)
    finally:
        tmp.unlink(missing_ok=True)


def cache_dir() -> Path:
    """``$ICEBERG_EXEC_CACHE_DIR``, else ``$XDG_CACHE_HOME/iceberg-exec``, else ``~/.cache/iceberg-exec``."""
    explicit = os.environ.get("ICEBERG_EXEC_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "iceberg-exec"


def shaded_jackson_jar(inputs: list[Path] | None = None, directory: Path | None = None) -> Path:
    """The relocated Jackson jar, built on first use and cached under :func:`cache_dir`, keyed by the
    names and sizes of the input jars and :data:`BUILD_VERSION`."""
    inputs = inputs or default_inputs()
    key = hashlib.sha256(
        repr((BUILD_VERSION, [(p.name, p.stat().st_size) for p in inputs])).encode()
    ).hexdigest()[:16]
    output = (directory or cache_dir()) / f"iceberg-shaded-jackson-{key}.jar"
    if not output.exists():
        build(output, inputs)
    return output


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    inputs = [Path(p) for p in sys.argv[2:]] or default_inputs()
    build(out, inputs)
    print(f"wrote {out} from {', '.join(p.name for p in inputs)}")


if __name__ == "__main__":
    main()
