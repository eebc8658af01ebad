import json,sys,statistics as st,collections
rows=[json.loads(l) for l in open(sys.argv[1])]
by=collections.defaultdict(dict)
for r in rows:
    tag='new' if not r['bin'].startswith('/tmp/base') else 'base'
    by[(r['test'],r['round'])][tag]=r['out']
tests=sorted({k[0] for k in by})
for t in tests:
    ratios=[];fb=[];fn=[];tb=[];tn=[]
    for (tt,rd),d in sorted(by.items()):
        if tt!=t or len(d)<2: continue
        b=st.median(d['base']['tok_s']); n=st.median(d['new']['tok_s'])
        ratios.append(n/b); tb.append(b); tn.append(n)
        if 'fraction_of_floor' in d['new']:
            fb.append(st.median(d['base']['fraction_of_floor'])); fn.append(st.median(d['new']['fraction_of_floor']))
    print(t, 'tok/s base', [round(x,2) for x in tb], 'new', [round(x,2) for x in tn], 'ratio', [round(x,3) for x in ratios], 'floor base', [round(x,3) for x in fb], 'new', [round(x,3) for x in fn])
