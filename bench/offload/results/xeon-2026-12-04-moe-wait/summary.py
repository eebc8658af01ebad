# Per configuration: each run's mean ms/token and stall for --moe-wait all and ready, the
# prediction errors (from the profile; p: each round probed) and ready / all per pair.
#   python3 summary.py res-0.25 0.25
import json,sys,glob,statistics as st
O=sys.argv[1]; res=sys.argv[2]
runs={}
for f in sorted(glob.glob(f'{O}/bench-{res}-t2-*-*.json')):
    parts=f[:-5].split('-'); wait=parts[-2]; pair=int(parts[-1])
    d=json.load(open(f))
    for c in d['configurations']:
        R=c['rounds']
        ms=st.mean(r['ms_per_token']['mean'] for r in R)
        stall=st.mean(r['stall_ms_per_token']['total'] for r in R) if 'stall_ms_per_token' in R[0] else 0
        runs.setdefault(c['name'],{}).setdefault(wait,{})[pair]=dict(ms=ms,stall=stall,sim=c.get('simulated_ms_per_token'),probed=c.get('simulated_probed_ms_per_token'))
floor=None
for name,w in runs.items():
    line=[name[:42].ljust(42)]
    for wait in ('all','ready'):
        v=w.get(wait,{})
        line.append(wait+' '+' '.join('%.1f'%v[p]['ms'] for p in sorted(v)))
        line.append('stall '+' '.join('%.1f'%v[p]['stall'] for p in sorted(v)))
        errs=[]
        for p in sorted(v):
            if v[p]['sim']: errs.append('%+.1f'%(100*(v[p]['sim']/v[p]['ms']-1)))
            if v[p]['probed']: errs.append('p%+.1f'%(100*(v[p]['probed']/v[p]['ms']-1)))
        line.append('err '+','.join(errs))
    if 'all' in w and 'ready' in w:
        rat=[w['ready'][p]['ms']/w['all'][p]['ms'] for p in sorted(w['all']) if p in w['ready']]
        line.append('ratio '+' '.join('%.3f'%x for x in rat))
    print(' | '.join(line))
