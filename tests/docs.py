#!/usr/bin/env python3
"""docs - what the documents and the comments say of the tree is the tree;
`make test` runs it (make check-docs).

README.md's Architecture table has one row for each folder of
tests/layers.py's table and names in its "uses" column exactly what that
table lets the folder use (a parenthesis says what for, and is not read);
its other rows name folders that exist. Every path README.md,
tests/e2e/README.md or a man page names, and every file name with a folder
in a comment of the C sources (store/lmdb/store_int.h, esmtp/deliver_smtp.c),
exists: from the top of the tree or, in a comment, beside the file naming
it, whenever its first folder is one of the tree's. A file moved or renamed
without its mentions fails here, as does a layer added without its row.
And what a user reads (those documents, the configurations shipped) points
at the man pages, never at SPEC.md, the contract a clone does not have.
A function's one-line comment (/* name - purpose */, STYLE.md) names the
function it stands over, and stands over a function, not another comment."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from layers import MAY_USE  # noqa: E402

SKIP = ('.git', 'build', 'build-asan', 'build-fuzz', 'bin', 'var')
DOCS = ['README.md', 'tests/e2e/README.md', 'doc/idemrelay.8', 'doc/idemrelay.conf.5',
        'doc/idemrelayctl.8']
USER_DOCS = DOCS + ['conf/idemrelay.conf', 'doc/idemrelay.conf.example']
SPEC = re.compile(r'\bSPEC\b')
PATH = re.compile(r'(?<![\w./~-])([A-Za-z_][\w-]*(?:/[\w.-]+)+/?)')
C_PATH = re.compile(r'(?<![\w./~-])([A-Za-z_][\w-]*(?:/[\w-]+)*/[\w-]+\.[ch])\b')
COMMENT = re.compile(r'/\*.*?\*/|//[^\n]*', re.S)
NAME_COMMENT = re.compile(r'/\*\s*(?:\n\s*\*\s*)?([a-z_][a-z0-9_]*) - (?:(?!\*/).)*\*/\n', re.S)
FNPTR = re.compile(r'[^;{}()]*\(\s*\*\s*([a-z_]\w*)\s*\)\s*\(')
DEFINITION = re.compile(r'(?:static\s+|extern\s+|inline\s+)*[a-z_][\w \t*]*?\**\b([a-z_]\w*)\s*\(')


def tree(top):
    """tree - every folder and file under top (relative), build outputs left out"""
    paths = set()
    for d, subdirs, files in os.walk(top):
        rel = os.path.relpath(d, top)
        subdirs[:] = [s for s in subdirs if not (rel == '.' and s in SKIP)]
        if rel != '.':
            paths.add(rel)
        paths.update(os.path.normpath(os.path.join(rel, f)) for f in files)
    return paths


def named(paths, path, base):
    """named - whether path, as written in a file in folder base, is in the tree;
    None when its first folder is none of the tree's (a system or web path)"""
    path = path.rstrip('.')
    first = path.split('/')[0]
    tries = [path] if first in paths else []
    if base and os.path.join(base, first) in paths:
        tries.append(os.path.join(base, path))
    if not tries:
        return None
    return any(os.path.normpath(t) in paths for t in tries)


def check_paths(top, paths):
    """check_paths - the documents' paths and the comments' file names"""
    bad = []
    for doc in DOCS:
        with open(os.path.join(top, doc)) as f:
            for n, line in enumerate(f, 1):
                for p in PATH.findall(line):
                    if named(paths, p, None) is False:
                        bad.append('%s:%d names %s, which is not in the tree' % (doc, n, p))
    for src in sorted(p for p in paths if p.endswith(('.c', '.h'))):
        with open(os.path.join(top, src), errors='replace') as f:
            text = f.read()
        for m in COMMENT.finditer(text):
            for p in C_PATH.findall(m.group(0)):
                if named(paths, p, os.path.dirname(src)) is False:
                    n = text.count('\n', 0, m.start()) + 1 + m.group(0).count('\n', 0,
                                                                             m.group(0).find(p))
                    bad.append('%s:%d: a comment names %s, which is not in the tree' % (src, n, p))
    return bad


def check_names(top, paths):
    """check_names - each /* name - purpose */ over a function names it"""
    bad = []
    for src in sorted(p for p in paths if p.endswith(('.c', '.h'))):
        with open(os.path.join(top, src), errors='replace') as f:
            text = f.read()
        for m in NAME_COMMENT.finditer(text):
            name, rest = m.group(1), text[m.end():m.end() + 400]
            line = text.count('\n', 0, m.start()) + 1
            if NAME_COMMENT.match(rest):
                bad.append('%s:%d: the comment of %s() stands over another comment'
                           % (src, line, name))
                continue
            d = FNPTR.match(rest) or DEFINITION.match(rest)
            if d and '\n\n' not in rest[:d.end()] and d.group(1) != name:
                bad.append('%s:%d: the comment of %s() stands over %s()'
                           % (src, line, name, d.group(1)))
    return bad


def check_spec(top):
    """check_spec - no document a user has names SPEC.md"""
    bad = []
    for doc in USER_DOCS:
        with open(os.path.join(top, doc)) as f:
            for n, line in enumerate(f, 1):
                if SPEC.search(line):
                    bad.append('%s:%d names SPEC, which a clone does not have: point at '
                               'the man pages' % (doc, n))
    return bad


def architecture(top):
    """architecture - README.md's Architecture table: {folder: [uses]} in order"""
    with open(os.path.join(top, 'README.md')) as f:
        text = f.read()
    m = re.search(r'^## Architecture\n(.*?)(?=^## )', text, re.M | re.S)
    rows = {}
    if not m:
        return rows
    table = re.search(r'^\| folder \| what \| uses \|\n\|[-|]+\|\n((?:\|.*\n)+)', m.group(1), re.M)
    for line in (table.group(1).splitlines() if table else []):
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        uses = cells[-1]
        while re.search(r'\([^()]*\)', uses):
            uses = re.sub(r'\s*\([^()]*\)', '', uses)
        for folder in re.findall(r'`([\w/]+)/`', cells[0]):
            rows[folder] = [u.strip() for u in uses.split(',') if u.strip()]
    return rows


def check_architecture(top, paths):
    """check_architecture - the README's table is tests/layers.py's"""
    rows = architecture(top)
    if not rows:
        return ['README.md: no "## Architecture" table with columns folder, what, uses']
    bad = []
    for folder in sorted(MAY_USE):
        if folder not in rows:
            bad.append('README.md Architecture: no row for %s/ (tests/layers.py has it)' % folder)
        elif sorted(rows[folder]) != sorted(MAY_USE[folder]):
            bad.append('README.md Architecture: %s/ uses %s, tests/layers.py says %s'
                       % (folder, ', '.join(rows[folder]) or 'nothing',
                          ', '.join(MAY_USE[folder]) or 'nothing'))
    for folder in sorted(set(rows) - set(MAY_USE)):
        if folder not in paths:
            bad.append('README.md Architecture: a row for %s/, which is not in the tree' % folder)
        elif rows[folder]:
            bad.append('README.md Architecture: %s/ uses %s, but it is no layer of '
                       'tests/layers.py' % (folder, ', '.join(rows[folder])))
    return bad


def main():
    top = sys.argv[1] if len(sys.argv) > 1 else '.'
    paths = tree(top)
    bad = (check_architecture(top, paths) + check_paths(top, paths) + check_spec(top)
           + check_names(top, paths))
    for b in bad:
        print('docs: ' + b)
    print('docs: %s' % ('%d problems' % len(bad) if bad else
                        "README's Architecture is tests/layers.py's table, every path "
                        "named is in the tree, no user's document names SPEC, and each "
                        "function's comment names it"))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
