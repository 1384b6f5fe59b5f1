#!/usr/bin/python3
"""Checks that meshpool's folders depend on each other only as the layer
table in docs/ARCHITECTURE.md allows (the table is the one source of truth).

  tools/check_layering.py [ROOT]

Checks, over every C++ source under the project's folders:
  * `#include "X/..."` of a project folder X is allowed for the including
    folder (a folder may always include itself);
  * every `meshpool_*` target a folder's CMake links belongs to a folder the
    table allows;
  * <infiniband/verbs.h> is included only by rdma/verbs_* files;
  * gRPC types (<grpcpp/...>, *.grpc.pb.h, proto/proto.h) appear only in
    proto/, the service and stub layers, tools/, tests/ and bench/.
Prints every violation and exits 1 if there is one; prints a one-line
summary and exits 0 otherwise.
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), ".."))
DOC = os.path.join(ROOT, "docs", "ARCHITECTURE.md")
SOURCE_EXT = (".h", ".cc", ".cpp")

# Files outside proto/, tools/, tests/ and bench/ that may touch gRPC types:
# the thin service and stub layers (ARCHITECTURE.md, "Layers").
GRPC_FILES = re.compile(
    r"^(store/node_service\.(h|cc)"
    r"|coordinator/coordinator_service\.(h|cc)"
    r"|coordinator/region_nodes_grpc\.cc"
    r"|coordinator/etcd_client\.cc"
    r"|placement/coordinator_client\.cc"
    r"|client/node_connection\.(h|cc))$")
GRPC_FOLDERS = {"proto", "auth", "tools", "tests", "bench", "python"}


def read_layers():
    """Parses the table between the layers:begin/end markers of the doc:
    lines `folder/  uses: a b c`, the names one space apart and any
    description after two spaces (`uses: *` for anything, `uses: -` for
    nothing). Returns {folder: set of folders or None for any}."""
    text = open(DOC, encoding="utf-8").read()
    m = re.search(r"<!-- layers:begin -->(.*?)<!-- layers:end -->", text, re.S)
    if not m:
        sys.exit(f"{DOC}: no <!-- layers:begin --> ... <!-- layers:end --> table")
    layers = {}
    for line in m.group(1).splitlines():
        lm = re.match(r"^\s*([a-z_]+)/\s+uses:\s+([a-z_*-]+(?: [a-z_*-]+)*)"
                      r"(?:\s{2,}.*)?$", line)
        if not lm:
            continue
        folder, uses = lm.group(1), lm.group(2).split()
        if uses == ["*"]:
            layers[folder] = None
        elif uses == ["-"]:
            layers[folder] = set()
        else:
            layers[folder] = {u.rstrip("/") for u in uses}
    if not layers:
        sys.exit(f"{DOC}: the layers table has no `folder/  uses: ...` lines")
    return layers


def sources(folder):
    for dirpath, _, names in os.walk(os.path.join(ROOT, folder)):
        for name in sorted(names):
            if name.endswith(SOURCE_EXT):
                path = os.path.join(dirpath, name)
                yield os.path.relpath(path, ROOT), path


def target_folders():
    """{meshpool_target: folder} from add_library() in each folder's CMake."""
    owners = {}
    for folder in os.listdir(ROOT):
        cm = os.path.join(ROOT, folder, "CMakeLists.txt")
        if not os.path.isfile(cm):
            continue
        for t in re.findall(r"add_library\(\s*(meshpool_\w+)", open(cm).read()):
            owners[t] = folder
    return owners


def cmake_links(folder):
    """Yields (target, linked meshpool_* target) from a folder's CMake files."""
    d = os.path.join(ROOT, folder)
    for name in sorted(os.listdir(d)):
        if not (name == "CMakeLists.txt" or name.endswith(".cmake")):
            continue
        text = re.sub(r"#[^\n]*", "", open(os.path.join(d, name)).read())
        for m in re.finditer(r"target_link_libraries\(\s*(\S+)(.*?)\)", text, re.S):
            for dep in re.findall(r"\bmeshpool_\w+", m.group(2)):
                yield f"{folder}/{name}", m.group(1), dep


def main():
    layers = read_layers()
    owners = target_folders()
    folders = sorted(f for f in layers if os.path.isdir(os.path.join(ROOT, f)))
    errors = []
    includes_checked = 0
    for folder in folders:
        allowed = layers[folder]
        for rel, path in sources(folder):
            for n, line in enumerate(open(path, encoding="utf-8"), 1):
                m = re.match(r'\s*#\s*include\s*([<"])([^>"]+)[>"]', line)
                if not m:
                    continue
                inc = m.group(2)
                top = inc.split("/")[0]
                close = {"\"": "\"", "<": ">"}[m.group(1)]
                where = f"{rel}:{n}: #include {m.group(1)}{inc}{close}"
                if m.group(1) == '"' and top in layers and top != folder:
                    includes_checked += 1
                    if allowed is not None and top not in allowed:
                        errors.append(f"{where}: {folder}/ may not use {top}/ "
                                      f"(allowed: {' '.join(sorted(allowed)) or 'nothing'})")
                if inc == "infiniband/verbs.h" and not re.match(
                        r"^rdma/verbs_", rel):
                    errors.append(f"{where}: only rdma/verbs_* may include verbs")
                grpc = (inc.startswith("grpcpp/") or inc.endswith(".grpc.pb.h")
                        or inc == "proto/proto.h")
                if grpc and folder not in GRPC_FOLDERS and not GRPC_FILES.match(rel):
                    errors.append(f"{where}: gRPC types stop at the service and "
                                  "stub layers (see GRPC_FILES in this script)")
        for where, target, dep in cmake_links(folder):
            if dep not in owners:
                continue  # an imported or test-only name
            dep_folder = owners[dep]
            if allowed is not None and dep_folder != folder and dep_folder not in allowed:
                errors.append(f"{where}: {target} links {dep} ({dep_folder}/), "
                              f"which {folder}/ may not use")
    missing = [f for f in layers if not os.path.isdir(os.path.join(ROOT, f))]
    for f in missing:
        errors.append(f"{DOC}: the layers table names {f}/, which does not exist")
    for folder in os.listdir(ROOT):
        if (os.path.isfile(os.path.join(ROOT, folder, "CMakeLists.txt"))
                and folder not in layers):
            errors.append(f"{folder}/ has a CMakeLists.txt but no row in the "
                          f"layers table of {DOC}")
    if errors:
        print("\n".join(errors))
        print(f"layering: {len(errors)} violation(s); the allowed order is the "
              "layers table in docs/ARCHITECTURE.md")
        return 1
    print(f"layering: {len(folders)} folders, {includes_checked} cross-folder "
          "includes and every meshpool_* link follow docs/ARCHITECTURE.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
