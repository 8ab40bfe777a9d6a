"""Make a checkpoint step folder look like one written before train.precision was recorded:
delete every stage group's `precision` attribute from its rank files, then write the
manifest's sizes and CRC-32s again so that it still verifies (tests/mpi/precision.sh)."""
import json
import os
import sys
import zlib

import h5py

step = sys.argv[1]
for f in sorted(os.listdir(step)):
    if f.endswith('.h5'):
        with h5py.File(os.path.join(step, f), 'r+') as h:
            for g in h:
                if g.startswith('stage_'):
                    del h[g].attrs['precision']
manifest = os.path.join(step, 'manifest.json')
m = json.load(open(manifest))
for e in m['files']:
    b = open(os.path.join(step, e['file']), 'rb').read()
    e['bytes'], e['crc32'] = len(b), zlib.crc32(b)
json.dump(m, open(manifest, 'w'), indent=2)
