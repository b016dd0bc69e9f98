#!/usr/bin/env python3
"""The strict half of plrt's ABI check: compares two abidw XML files (baseline, current) by the
minor rule of plugin_api/plrt/pl_abi.h, and prints every violation.  Exit 0: compatible; 1: not.

abidiff (run first by scripts/abi-check) reports the changes; its suppression
`has_data_member_inserted_at = end` lets appended fields pass, but libabigail 2.2 also lets pass a
struct whose members were reordered or retyped without a size change.  This closes that hole:

  - every struct of the baseline still exists, is no smaller, and keeps every member at the same
    offset with the same type; a new member lies after the baseline's last member (appended);
  - a struct that another struct holds by value (PL_Tensor in PL_Parameter), or that is passed as
    an array (the names in FIXED_SIZE_TYPES.txt: the array's stride is its size), keeps its size:
    a field appended to it must fit in its tail padding (as PL_Parameter.kind did in 1.4);
  - every typedef keeps its underlying type; every named enum keeps each enumerator's value;
  - every exported function and variable keeps its type (new ones may be added).
Types are compared by their spelled-out form ("const PL_Host*", "PL_Error* (const char*)").
"""
import sys
import xml.etree.ElementTree as ET


class Corpus:
    def __init__(self, path):
        root = ET.parse(path).getroot()
        self.types = {}
        self.structs, self.typedefs, self.enums, self.functions, self.variables = {}, {}, {}, {}, {}
        for el in root.iter():
            tid = el.get("id")
            if tid and el.tag in TYPE_TAGS:
                self.types[tid] = el
        for el in root.iter():
            name = el.get("name")
            if el.tag == "class-decl" and name and el.get("is-declaration-only") != "yes":
                self.structs.setdefault(name, el)
            elif el.tag == "typedef-decl" and name:
                self.typedefs.setdefault(name, el)
            elif el.tag == "enum-decl" and name and not name.startswith("__anonymous"):
                self.enums.setdefault(name, el)
            elif el.tag == "function-decl" and el.get("elf-symbol-id"):
                self.functions.setdefault(el.get("elf-symbol-id"), el)
            elif el.tag == "var-decl" and el.get("elf-symbol-id"):
                self.variables.setdefault(el.get("elf-symbol-id"), el)

    def spell(self, tid, depth=0):
        """The type `tid` spelled out; named structs, unions and enums by name (checked apart)."""
        el = self.types.get(tid)
        if el is None or depth > 50:
            return "?" + str(tid)
        tag = el.tag
        if tag in ("type-decl", "typedef-decl"):
            return el.get("name")
        if tag in ("class-decl", "union-decl", "enum-decl"):
            kind = {"class-decl": "struct", "union-decl": "union", "enum-decl": "enum"}[tag]
            name = el.get("name", "")
            if name and not name.startswith("__anonymous"):
                return kind + " " + name
            members = [
                "%s %s@%s" % (self.spell(m.find("var-decl").get("type-id"), depth + 1),
                              m.find("var-decl").get("name"), m.get("layout-offset-in-bits"))
                for m in el.findall("data-member")
            ]
            return kind + " {" + "; ".join(members) + "}"
        if tag == "pointer-type-def":
            return self.spell(el.get("type-id"), depth + 1) + "*"
        if tag == "qualified-type-def":
            quals = [q for q in ("const", "volatile", "restrict") if el.get(q) == "yes"]
            return " ".join(quals) + " " + self.spell(el.get("type-id"), depth + 1)
        if tag == "array-type-def":
            dims = "".join("[%s]" % s.get("length", "?") for s in el.findall("subrange"))
            return self.spell(el.get("type-id"), depth + 1) + dims
        if tag == "function-type":
            return self.signature(el, depth + 1)
        return tag + "?"

    def signature(self, el, depth=0):
        params = []
        for p in el.findall("parameter"):
            params.append("..." if p.get("is-variadic") == "yes" else self.spell(p.get("type-id"), depth))
        ret = el.find("return")
        return "%s (%s)" % (self.spell(ret.get("type-id"), depth) if ret is not None else "void", ", ".join(params))


TYPE_TAGS = {"type-decl", "typedef-decl", "class-decl", "union-decl", "enum-decl", "pointer-type-def",
             "qualified-type-def", "array-type-def", "function-type", "reference-type-def"}


def members(corpus, struct):
    out = {}
    for m in struct.findall("data-member"):
        var = m.find("var-decl")
        out[var.get("name")] = (int(m.get("layout-offset-in-bits", "0")), corpus.spell(var.get("type-id")))
    return out


def embedded_structs(corpus):
    """Names of the structs that another struct holds by value (a member that is the struct itself)."""
    names = set()
    for s in corpus.structs.values():
        for m in s.findall("data-member"):
            el = corpus.types.get(m.find("var-decl").get("type-id"))
            while el is not None and el.tag in ("typedef-decl", "qualified-type-def"):
                el = corpus.types.get(el.get("type-id"))
            if el is not None and el.tag == "class-decl" and el.get("name"):
                names.add(el.get("name"))
    return names


def compare(old, new, fixed_size=()):
    problems = []
    fixed = set(fixed_size) | embedded_structs(old)
    for name, s_old in sorted(old.structs.items()):
        s_new = new.structs.get(name)
        if s_new is None:
            problems.append("struct %s was removed" % name)
            continue
        size_old, size_new = int(s_old.get("size-in-bits", "0")), int(s_new.get("size-in-bits", "0"))
        if size_new < size_old:
            problems.append("struct %s shrank from %d to %d bits" % (name, size_old, size_new))
        elif size_new != size_old and name in fixed:
            problems.append("struct %s grew from %d to %d bits, but its size is fixed: %s" %
                            (name, size_old, size_new,
                             "another struct holds it by value" if name in embedded_structs(old) else
                             "it is passed as an array (abi/fixed_size_types.txt), so its size is the stride"))
        m_old, m_new = members(old, s_old), members(new, s_new)
        for field, (offset, spelled) in m_old.items():
            if field not in m_new:
                problems.append("struct %s: member '%s' was removed or renamed" % (name, field))
            elif m_new[field] != (offset, spelled):
                problems.append("struct %s: member '%s' was '%s' at bit %d, is '%s' at bit %d" %
                                (name, field, spelled, offset, m_new[field][1], m_new[field][0]))
        last_old = max((offset for offset, _ in m_old.values()), default=-1)
        for field, (offset, spelled) in m_new.items():
            if field not in m_old and offset <= last_old:
                problems.append("struct %s: new member '%s' at bit %d is not after the old last member (bit %d): "
                                "a minor version only appends" % (name, field, offset, last_old))
    for name, t_old in sorted(old.typedefs.items()):
        t_new = new.typedefs.get(name)
        if t_new is None:
            problems.append("typedef %s was removed" % name)
        elif old.spell(t_old.get("type-id")) != new.spell(t_new.get("type-id")):
            problems.append("typedef %s was '%s', is '%s'" %
                            (name, old.spell(t_old.get("type-id")), new.spell(t_new.get("type-id"))))
    for name, e_old in sorted(old.enums.items()):
        e_new = new.enums.get(name)
        values_new = {e.get("name"): e.get("value") for e in e_new.findall("enumerator")} if e_new is not None else {}
        for e in e_old.findall("enumerator"):
            if values_new.get(e.get("name")) != e.get("value"):
                problems.append("enum %s: %s was %s, is %s" % (name, e.get("name"), e.get("value"),
                                                             values_new.get(e.get("name"), "removed")))
    for sym, f_old in sorted(old.functions.items()):
        f_new = new.functions.get(sym)
        if f_new is None:
            problems.append("function %s was removed" % sym)
        elif old.signature(f_old) != new.signature(f_new):
            problems.append("function %s was '%s', is '%s'" % (sym, old.signature(f_old), new.signature(f_new)))
    for sym, v_old in sorted(old.variables.items()):
        v_new = new.variables.get(sym)
        if v_new is None:
            problems.append("variable %s was removed" % sym)
        elif old.spell(v_old.get("type-id")) != new.spell(v_new.get("type-id")):
            problems.append("variable %s was '%s', is '%s'" %
                            (sym, old.spell(v_old.get("type-id")), new.spell(v_new.get("type-id"))))
    return problems


def main():
    if len(sys.argv) not in (3, 4):
        print("usage: abi_layout.py BASELINE.xml CURRENT.xml [FIXED_SIZE_TYPES.txt]", file=sys.stderr)
        return 2
    fixed = []
    if len(sys.argv) == 4:
        with open(sys.argv[3]) as f:
            fixed = [line.split("#")[0].strip() for line in f if line.split("#")[0].strip()]
    problems = compare(Corpus(sys.argv[1]), Corpus(sys.argv[2]), fixed)
    for p in problems:
        print("  incompatible: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
