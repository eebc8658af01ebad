# ready / all per (pair, round), paired round by round: median and range.
#   python3 paired_ratios.py res-0.5 0.5
import json,sys,glob,statistics as st
O=sys.argv[1]; res=sys.argv[2]
data={}
for f in sorted(glob.glob(f'{O}/bench-{res}-t2-*-*.json')):
    parts=f[:-5].split('-'); wait=parts[-2]; pair=int(parts[-1])
    d=json.load(open(f))
    for c in d['configurations']:
        for r in c['rounds']:
            data.setdefault(c['name'],{}).setdefault(wait,{})[(pair,r['round'])]=r['ms_per_token']['mean']
for name,w in data.items():
    keys=sorted(set(w.get('all',{}))&set(w.get('ready',{})))
    rat=[w['ready'][k]/w['all'][k] for k in keys]
    print(name[:42].ljust(42),'all %.1f ready %.1f'%(st.mean(w['all'].values()),st.mean(w['ready'].values())),
          'ratio median %.3f range %.3f-%.3f n=%d'%(st.median(rat),min(rat),max(rat),len(rat)))
