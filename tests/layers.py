#!/usr/bin/env python3
"""layers - every #include "..." points down the folder order, or sideways
into a folder the table below allows; `make test` runs it.

The order, top first: the programs (daemon/, ctl/), delivery (deliver/,
its libesmtp adapter in deliver/esmtp/), acceptance (relay/), the
transports (tls/), the protocol engine (smtp/), the store interface
(store/; each backend below it, store/lmdb/), configuration (conf/),
and util/, which knows nothing of mail. A subfolder may use its
parent; a parent never its subfolder, so the store interface cannot
lean on one backend and delivery's scheduler not on libesmtp. The one
exception is store/store_open.c, the one place a backend is chosen."""
import os
import re
import sys

MAY_USE = {
    'util': [],
    'conf': ['util'],
    'store': ['conf', 'util'],
    'store/lmdb': ['store', 'util'],
    'store/pg': ['store', 'util'],
    'smtp': ['util'],
    'tls': ['util'],
    'relay': ['tls', 'smtp', 'store', 'conf', 'util'],
    'deliver': ['relay', 'tls', 'smtp', 'store', 'conf', 'util'],
    'deliver/esmtp': ['deliver', 'relay', 'tls', 'smtp', 'store', 'conf', 'util'],
    'ctl': ['relay', 'store', 'conf', 'util'],
    'daemon': ['deliver', 'deliver/esmtp', 'relay', 'tls', 'smtp', 'store', 'conf', 'util'],
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


def main():
    top = sys.argv[1] if len(sys.argv) > 1 else '.'
    bad = check(top)
    for b in bad:
        print('layers: ' + b)
    print('layers: %s' % ('%d problems' % len(bad) if bad else 'every include points down'))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
