#!/usr/bin/env python3
"""Checks that scripts/setup.sh --main installs enough for CMake preset "main" (scripts/run.sh).

Usage: main_job_packages.py SOURCE_DIR BUILD_DIR

Every header the build read (ninja's dependency log) and every shared library its programs and
plugins load (ldd) must belong to a Debian package of `setup.sh --list --main` or to one of their
dependencies, recursively (Depends and Pre-Depends of the installed packages, alternatives and
virtual packages resolved to what is installed).  A file that belongs to no package (a /usr/local
install, a file copied by hand) fails too: a fresh machine would not have it.  Prints what it
checked; exits 1 naming each file and package outside the list.
"""
import os
import re
import subprocess
import sys


def run(argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw).stdout


def installed_packages():
    """name -> (depends text, provides text) of every installed package (architecture dropped)."""
    out = run(["dpkg-query", "-W", "-f", "${Package}\t${Status}\t${Depends}, ${Pre-Depends}\t${Provides}\n"])
    pkgs = {}
    for line in out.splitlines():
        name, status, depends, provides = (line.split("\t") + ["", "", ""])[:4]
        if status.endswith("installed") and "not-installed" not in status:
            pkgs[name] = (depends, provides)
    return pkgs


def names(field):
    """The alternatives of each entry of a Depends-like field: [["a", "b"], ["c"]]."""
    out = []
    for entry in field.split(","):
        alts = [re.sub(r"[:\s(].*", "", a.strip()) for a in entry.split("|")]
        alts = [a for a in alts if a]
        if alts:
            out.append(alts)
    return out


def closure(roots, pkgs):
    providers = {}
    for name, (_, provides) in pkgs.items():
        for alts in names(provides):
            providers.setdefault(alts[0], []).append(name)
    seen, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for alts in names(pkgs.get(p, ("", ""))[0]):
            for a in alts:
                hits = [a] if a in pkgs else providers.get(a, [])
                if hits:
                    todo.extend(hits)
                    break
    return seen


def file_owners():
    """Every path dpkg installed -> its package (from /var/lib/dpkg/info/*.list, read once)."""
    owned = {}
    info = "/var/lib/dpkg/info"
    for f in os.listdir(info):
        if f.endswith(".list"):
            pkg = f[: -len(".list")].split(":")[0]
            with open(os.path.join(info, f), encoding="utf-8", errors="replace") as lines:
                for line in lines:
                    owned.setdefault(line.rstrip("\n"), pkg)
    return owned


def owner(path, owned):
    """The package of `path`, also through a symlinked folder (/lib -> /usr/lib), or None."""
    for p in (path, os.path.realpath(path)):
        if p in owned:
            return owned[p]
        for prefix in ("/usr/lib/", "/usr/bin/", "/usr/sbin/"):
            if p.startswith(prefix) and p[4:] in owned:  # merged /usr: dpkg knows /lib/...
                return owned[p[4:]]
    return None


def system_files(source, build):
    """The headers (ninja's dependency log) and shared libraries (ldd) from outside the tree."""
    tree = (os.path.abspath(source) + "/", os.path.abspath(build) + "/")
    headers = set()
    out = run(["ninja", "-C", build, "-t", "deps"])
    for line in out.splitlines():
        f = line.strip()
        if line.startswith("    ") and f.startswith("/") and not os.path.abspath(f).startswith(tree):
            headers.add(os.path.normpath(f))
    libs = set()
    for root, _, files in os.walk(build):
        for f in files:
            path = os.path.join(root, f)
            if not (f.endswith(".so") or root.endswith("/bin")) or not os.access(path, os.X_OK):
                continue
            p = subprocess.run(["ldd", path], capture_output=True, text=True)
            for m in re.finditer(r"=> (/\S+)", p.stdout):
                if not os.path.abspath(m.group(1)).startswith(tree):
                    libs.add(m.group(1))
    return headers, libs


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    source, build = sys.argv[1], sys.argv[2]
    listed = run(["bash", os.path.join(source, "scripts/setup.sh"), "--list", "--main"]).split()
    pkgs = installed_packages()
    missing = [p for p in listed if p not in pkgs]
    if missing:
        sys.exit(f"setup.sh --main lists packages that are not installed here: {' '.join(missing)}")
    allowed = closure(listed, pkgs)
    headers, libs = system_files(source, build)
    if not headers:
        sys.exit(f"no headers in {build}'s dependency log: is it a built ninja tree?")
    owned = file_owners()
    bad = []
    for kind, files in (("header", headers), ("library", libs)):
        for f in sorted(files):
            pkg = owner(f, owned)
            if pkg is None:
                bad.append(f"{kind} {f}: no Debian package owns it")
            elif pkg not in allowed:
                bad.append(f"{kind} {f}: from package {pkg}, which setup.sh --main does not install")
    print(f"main job: {len(headers)} system headers and {len(libs)} libraries checked against "
          f"{len(listed)} packages of setup.sh --main ({len(allowed)} with their dependencies)")
    if bad:
        print("\n".join(bad))
        sys.exit(1)


if __name__ == "__main__":
    main()
