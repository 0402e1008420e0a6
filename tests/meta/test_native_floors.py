"""sys is the only native floor that makes syscalls (DESIGN.md, docs/architecture.md): every
raw syscall, sysfs read and ISA probe goes through native/sys/, so the fault-injection hook
reaches its error path. This greps every folder of native/ outside native/sys/ and fails on a
raw call."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "native"
# libc entry points that are system calls (or read /sys and /proc), and the ISA probes
RAW = ("mmap", "munmap", "mremap", "mprotect", "madvise", "mbind", "set_mempolicy",
       "get_mempolicy", "move_pages", "migrate_pages", "memfd_create", "open", "openat",
       "creat", "read", "write", "pread", "pwrite", "ftruncate", "fallocate", "fstat", "stat",
       "lstat", "fstatat", "fcntl", "flock", "ioctl", "link", "linkat", "unlink", "unlinkat",
       "rename", "renameat", "fchmod", "fchown", "kill", "getrandom", "syscall", "prctl",
       "sched_setaffinity", "sched_getaffinity", "pthread_setaffinity_np", "fopen",
       "opendir", "__builtin_cpu_supports", "__get_cpuid", "__cpuid_count", "xgetbv")
# a call of one of them: not a member (.x( ->x(), not part of a longer name, not cxk_/sys_
CALL = re.compile(r"(?<![\w.>])(?:::|std::)?(" + "|".join(map(re.escape, RAW)) + r")\s*\(")
PENDING: dict[str, str] = {}  # folders being cleaned on a branch: name -> why
# Folders that are not libcxlkit and may not link it: name -> why
OUTSIDE = {"preload": "libcxlkit_preload.so is preloaded into unmodified programs: C and libc "
                      "only (no libstdc++, no libcxlkit); its own mbind hook "
                      "(CXLKIT_PRELOAD_FAULT) reaches its error path"}


def code_lines(path: Path):
    """(line number, code) with // comments, /* */ comments and string literals blanked."""
    text = path.read_text()
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    for i, line in enumerate(text.splitlines(), 1):
        line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
        yield i, line.split("//", 1)[0]


def raw_calls(folder: Path) -> list[str]:
    out = []
    for path in sorted(folder.rglob("*")):
        if path.suffix not in (".cpp", ".h", ".c", ".cc"):
            continue
        for n, code in code_lines(path):
            for m in CALL.finditer(code):
                out.append(f"{path.relative_to(ROOT)}:{n}: {m.group(1)}(")
    return out


def test_no_raw_syscall_outside_native_sys():
    folders = [d for d in sorted(NATIVE.iterdir()) if d.is_dir() and d.name != "sys"]
    assert {"prim", "kv", "adam", "bench", "bind", "pool"} <= {d.name for d in folders}
    bad = []
    for d in folders:
        if d.name in PENDING or d.name in OUTSIDE:
            continue
        bad += raw_calls(d)
    assert not bad, ("raw syscalls outside native/sys/ (add a wrapper with the fault hook "
                     "in native/sys/sys.h):\n" + "\n".join(bad))


def test_the_pending_exception_still_has_raw_calls_to_clean():
    # once a pending folder is clean, this fails: then drop it from PENDING
    for name in PENDING:
        assert raw_calls(NATIVE / name), f"native/{name}/ is clean: remove it from PENDING"


def test_the_grep_finds_raw_calls_and_skips_wrappers_members_and_comments(tmp_path):
    f = tmp_path / "x.cpp"
    f.write_text("int a = ::mmap(0, 1);\n"
                 "if (FILE *f = std::fopen(p, \"re\")) {}\n"
                 "r = madvise (p, n, 1);\n"
                 "cxk::sys_madvise(p, n, 1); cxk_unmap(p, n); o.read(x); q->write(y);\n"
                 "// munmap(p, n) in a comment\n"
                 "/* kill(pid, 0)\n   unlink(path) */ s = \"open(\";\n"
                 "bool avx = __builtin_cpu_supports(\"avx2\");\n")
    got = [line.split(": ", 1)[1] for line in raw_calls_in(f)]
    assert got == ["mmap(", "fopen(", "madvise(", "__builtin_cpu_supports("]


def raw_calls_in(path: Path) -> list[str]:
    return [f"{path.name}:{n}: {m.group(1)}(" for n, code in code_lines(path)
            for m in CALL.finditer(code)]
