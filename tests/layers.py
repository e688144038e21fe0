#!/usr/bin/env python3
"""layers - every #include "..." points down the folder order, or sideways
into a folder the table below allows, and so does every linked symbol;
`make test` runs it.

The order, top first: the programs (daemon/, ctl/), delivery (deliver/,
its libesmtp adapter in deliver/esmtp/) and acceptance (relay/), peers
that never use each other, the queue core both use (queue/: the group
commit, QIDs, keys and their hashes, metrics), the transports (tls/),
the protocol engine (smtp/), the store interface
(store/; each backend below it, store/lmdb/), configuration (conf/),
and util/, which knows nothing of mail. A subfolder may use its
parent; a parent never its subfolder, so the store interface cannot
lean on one backend and delivery's scheduler not on libesmtp. The one
exception is store/store_open.c, the one place a backend is chosen.

With libraries and objects named (`make check-layers` names build/lib*.a
and the programs' objects), it reads their symbols with nm(1) as well:
a symbol a folder's objects leave undefined must not be defined by a
folder above it that is linked with it (a program that links both),
whatever the headers say: a call declared in a header of the folder's
own, or a libc function that a program overrides (ELF interposition),
is caught here. Symbols no folder defines are the system's. --self-test
plants an upward call into a copy of libutil.a and fails unless the
check finds it."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

MAY_USE = {
    'util': [],
    'conf': ['util'],
    'store': ['conf', 'util'],
    'store/lmdb': ['store', 'util'],
    'store/pg': ['store', 'util'],
    'smtp': ['util'],
    'tls': ['conf', 'util'],
    'queue': ['store', 'conf', 'util'],
    'relay': ['queue', 'tls', 'smtp', 'store', 'conf', 'util'],
    'deliver': ['queue', 'tls', 'smtp', 'store', 'conf', 'util'],
    'deliver/esmtp': ['deliver', 'queue', 'tls', 'smtp', 'store', 'conf', 'util'],
    'ctl': ['queue', 'store', 'conf', 'util'],
    'daemon': ['deliver', 'deliver/esmtp', 'relay', 'queue', 'tls', 'smtp', 'store', 'conf',
               'util'],
}
# store_open() is the one place a backend is chosen: its file alone
# reaches into the backends below the store interface
MAY_ALSO_USE = {'store/store_open.c': ['store/lmdb', 'store/pg']}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(path):
    """the table's folder a file lives in, or None outside the table"""
    d = os.path.dirname(path)
    return d if d in MAY_USE else None


def check(top):
    bad = []
    for d, subdirs, files in os.walk(top):
        rel = os.path.relpath(d, top)
        subdirs[:] = [s for s in subdirs if not s.startswith(('.', 'build'))
                      and os.path.join(rel, s) not in ('./tests', 'tests', 'debian', 'bin', 'var')]
        if rel != '.' and rel not in MAY_USE and any(f.endswith(('.c', '.h')) for f in files):
            bad.append('%s/ holds C files but has no place in the order' % rel)
    for folder in MAY_USE:
        if not os.path.isdir(os.path.join(top, folder)):
            bad.append('%s/ is in the table but not in the tree' % folder)
            continue
        for name in sorted(os.listdir(os.path.join(top, folder))):
            if not name.endswith(('.c', '.h')):
                continue
            path = os.path.join(folder, name)
            with open(os.path.join(top, path)) as f:
                text = f.read()
            for target in INCLUDE.findall(text):
                dest = os.path.normpath(os.path.join(folder, target))
                to = folder_of(dest)
                if to is None and not os.path.exists(os.path.join(top, dest)):
                    continue		# generated or system header
                if to == folder:
                    continue
                if to is None or to not in MAY_USE[folder] + MAY_ALSO_USE.get(path, []):
                    bad.append('%s includes "%s" (%s/ may use only %s)'
                               % (path, target, folder, ', '.join(MAY_USE[folder]) or 'nothing'))
    return bad


def below(folder):
    """the folders a folder's objects may be linked against: the table, closed"""
    seen, todo = set(), list(MAY_USE[folder])
    while todo:
        f = todo.pop()
        if f not in seen:
            seen.add(f)
            todo.extend(MAY_USE[f])
    return seen


def member_folder(top, lib, member):
    """the table's folder of an archive member: where its .c is, in the library's folders"""
    base = os.path.basename(lib)[3:-2]		# build/libstore.a: store
    src = member[:-2] + '.c'
    found = [f for f in MAY_USE if (f == base or f.startswith(base + '/'))
             and os.path.exists(os.path.join(top, f, src))]
    return found[0] if len(found) == 1 else base


def object_folder(path):
    """the table's folder of an object file: build/daemon/main.o: daemon"""
    parts = os.path.dirname(os.path.normpath(path)).split(os.sep)
    for i in range(len(parts)):
        if os.path.join(*parts[i:]) in MAY_USE:
            return os.path.join(*parts[i:])
    return None


def symbols(top, files):
    """{folder: (defined, {undefined symbol: [(object, its source)]})} of archives, objects"""
    out = subprocess.run(['nm', '-A', '-P'] + files, check=True, capture_output=True,
                         text=True).stdout
    table = {}
    for line in out.splitlines():
        where, name, kind = line.split()[:3]
        where = where.rstrip(':')
        if where.endswith(']'):			# GNU nm -P: lib.a[member.o]
            lib, member = where[:-1].split('[')
            folder, obj = member_folder(top, lib, member), '%s(%s)' % (lib, member)
        else:
            folder, obj, member = object_folder(where), where, os.path.basename(where)
        if folder is None:
            continue
        defs, undef = table.setdefault(folder, (set(), {}))
        if kind == 'U':
            undef.setdefault(name, []).append((obj, os.path.join(folder, member[:-2] + '.c')))
        elif kind in 'TDBRVWCGSI' or kind == 'u':
            defs.add(name)
    return table


def check_symbols(top, files):
    """each undefined symbol resolved by its own folder or one below, never above"""
    table = symbols(top, files)
    bad = []
    for folder, (defs, undef) in sorted(table.items()):
        down = below(folder)
        for name, obj, src in sorted((n, o, s) for n, users in undef.items() for o, s in users):
            if name in defs:
                continue
            for other, (odefs, _) in sorted(table.items()):
                if other == folder or other in down or name not in odefs \
                        or other in MAY_ALSO_USE.get(src, []):
                    continue
                if folder in below(other):	# linked together: the call goes up
                    bad.append('%s calls %s(), defined in %s/ above %s/'
                               % (obj, name, other, folder))
    return bad


PLANTED = 'void deliver_enqueue(void *d, const char *qid);\n' \
          'void planted(void) { deliver_enqueue(0, "x"); }\n'


def self_test(top, files):
    """plant an upward call (util/ calling deliver_enqueue()) into a copy of libutil.a"""
    util = [f for f in files if os.path.basename(f) == 'libutil.a']
    if not util or not any(os.path.basename(f) == 'libdeliver.a' for f in files):
        return ['--self-test needs libutil.a and libdeliver.a among the files']
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, 'planted.c'), 'w') as f:
            f.write(PLANTED)
        lib = os.path.join(tmp, 'libutil.a')
        shutil.copy(util[0], lib)
        subprocess.run([os.environ.get('CC', 'cc'), '-c', '-o', os.path.join(tmp, 'planted.o'),
                        os.path.join(tmp, 'planted.c')], check=True)
        subprocess.run(['ar', 'r', lib, os.path.join(tmp, 'planted.o')], check=True,
                       capture_output=True)
        found = check_symbols(top, [lib if f == util[0] else f for f in files])
    want = [b for b in found if 'planted.o' in b and 'deliver_enqueue()' in b]
    if len(want) != 1:
        return ['self-test: a planted upward call util/ -> deliver_enqueue() not found: %s'
                % (found or 'no problems reported')]
    return []


def main():
    args = sys.argv[1:]
    test = '--self-test' in args
    args = [a for a in args if a != '--self-test']
    top = args[0] if args else '.'
    files = args[1:]
    bad = check(top)
    if files:
        bad += self_test(top, files) if test else []
        bad += check_symbols(top, files)
    for b in bad:
        print('layers: ' + b)
    print('layers: %s' % ('%d problems' % len(bad) if bad else 'every include points down'
                          + (', and every linked symbol' if files else '')
                          + (' (the planted upward call was found)' if test else '')))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
