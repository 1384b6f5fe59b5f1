#!/usr/bin/python3
"""Keeps Linux-only system calls inside the files that are allowed them, so
that a macOS build (issue: Mac clusters) has one place per concern to give
a POSIX or Darwin counterpart.

  tools/check_platform.py [ROOT [--self-test]]

A Linux-only call or constant (LINUX_ONLY below) may appear only
  * in a file whose name ends in _linux.cc or _linux.h,
  * between `#ifdef __linux__` (or `#if defined(__linux__)`) and its
    matching #else/#endif, or
  * in a file listed in NOT_YET_SPLIT: code written before this check,
    until it is moved into per-platform files. The macOS port emptied the
    list; it stays for an exception that must wait, and only shrinks: a
    listed file that no longer needs it is reported, so that it is taken
    off.
Comments and string literals count too ("/proc/..." paths are strings).
Prints every violation and exits 1 if there is one; prints a one-line
summary and exits 0 otherwise.
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), ".."))
FOLDERS = ["auth", "bench", "client", "common", "coordinator", "format",
           "metrics", "placement", "proto", "python/src", "rdma", "store",
           "tests", "tools"]
SOURCE_EXT = (".h", ".cc", ".cpp")

# Calls, constants and paths Linux has and macOS does not (or not alike).
LINUX_ONLY = [
    r"\bmemfd_create\b", r"\bF_ADD_SEALS\b", r"\bF_SEAL_\w+", r"\bepoll_\w+",
    r"\bMAP_HUGETLB\b", r"\bMAP_POPULATE\b", r"\bMADV_HUGEPAGE\b",
    r"\bMAP_NORESERVE\b", r"\bSO_PEERCRED\b", r"\bstruct ucred\b",
    r"\bprctl\b", r"\bPR_SET_\w+", r"\beventfd\b", r"\bsignalfd\b",
    r"\bsigtimedwait\b", r"\baccept4\b", r"\bpipe2\b", r"\bSOCK_CLOEXEC\b",
    r"\bSOCK_NONBLOCK\b", r"\bfallocate\b", r"\bsched_setaffinity\b",
    r"\bgettid\b", r"\bmremap\b", r"\bO_DIRECT\b", r"\bTCP_QUICKACK\b",
    r"\bSO_BUSY_POLL\b", r"\bTCP_USER_TIMEOUT\b", r"\bsendmmsg\b",
    r"\brecvmmsg\b", r"\bsplice\b", r"\bsys/prctl\.h\b", r"\bsys/epoll\.h\b",
    r"\bsys/eventfd\.h\b", r"\bsys/signalfd\.h\b", r"\blinux/\w+\.h\b",
    r"\"/proc/", r"\"/sys/", r"\"/dev/infiniband",
]
PATTERN = re.compile("|".join(LINUX_ONLY))

# Written before this check and not yet split (none since the macOS port).
# Keep it sorted.
NOT_YET_SPLIT = set()

IF_LINUX = re.compile(r"^\s*#\s*(ifdef\s+__linux__|if\s+defined\(__linux__\))")
IF_ANY = re.compile(r"^\s*#\s*if")
ELSE = re.compile(r"^\s*#\s*(else|elif)")
ENDIF = re.compile(r"^\s*#\s*endif")


def hits(path):
    """(line number, text) of every Linux-only use outside __linux__ blocks."""
    found = []
    stack = []  # per open #if: True while inside a __linux__ branch
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if IF_LINUX.match(line):
                stack.append(True)
                continue
            if IF_ANY.match(line):
                stack.append(False)
                continue
            if ELSE.match(line) and stack:
                stack[-1] = False
                continue
            if ENDIF.match(line) and stack:
                stack.pop()
                continue
            if any(stack):
                continue
            m = PATTERN.search(line)
            if m:
                found.append((n, m.group(0)))
    return found


def check(root, not_yet_split):
    """(violations, files read, listed files that were needed)."""
    violations = []
    used = set()
    files = 0
    for folder in FOLDERS:
        top = os.path.join(root, folder)
        for dirpath, _, names in os.walk(top):
            for name in sorted(names):
                if not name.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                files += 1
                if re.search(r"_linux\.(h|cc)$", name):
                    continue
                found = hits(path)
                if not found:
                    continue
                if rel in not_yet_split:
                    used.add(rel)
                    continue
                for n, what in found:
                    violations.append(
                        f"{rel}:{n}: `{what}` is Linux-only: put it in a "
                        f"*_linux.cc file with a POSIX or Darwin counterpart, "
                        f"or inside #ifdef __linux__ with an #else")
    for rel in sorted(not_yet_split - used):
        violations.append(
            f"{rel}: listed in NOT_YET_SPLIT (tools/check_platform.py) but "
            f"no longer uses Linux-only calls: take it off the list")
    return violations, files, used


def self_test():
    """The check on a small tree it writes: it must flag exactly the
    unguarded call and the stale listing."""
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "rdma"))
        sources = {
            "rdma/bad.cc": "int f() { return epoll_create1(0); }\n",
            "rdma/guarded.cc": ("#ifdef __linux__\nint g() { return eventfd(0, 0); }\n"
                                "#else\nint g() { return -1; }\n#endif\n"),
            "rdma/pool_linux.cc": "int h() { return memfd_create(\"x\", 0); }\n",
            "rdma/after_else.cc": ("#ifdef __linux__\n#else\n"
                                   "int k() { return accept4(0, 0, 0, 0); }\n#endif\n"),
        }
        for rel, text in sources.items():
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        violations, _, _ = check(root, {"rdma/stale.cc"})
    got = sorted(v.split(":")[0] for v in violations)
    want = ["rdma/after_else.cc", "rdma/bad.cc", "rdma/stale.cc"]
    if got != want:
        print(f"self-test failed: flagged {got}, expected {want}")
        return 1
    print("platform check self-test: flags what it should, and only that")
    return 0


def main():
    if len(sys.argv) > 2 and sys.argv[2] == "--self-test":
        return self_test()
    violations, files, used = check(ROOT, NOT_YET_SPLIT)
    for v in violations:
        print(v)
    if violations:
        return 1
    print(f"platform: {files} files; Linux-only calls only in *_linux files, "
          f"__linux__ blocks and {len(used)} files not yet split")
    return 0


if __name__ == "__main__":
    sys.exit(main())
