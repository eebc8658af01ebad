import json,sys,glob,statistics as st
d=sys.argv[1]; res=sys.argv[2]; a=sys.argv[3] if len(sys.argv)>3 else 'normal'; b=sys.argv[4] if len(sys.argv)>4 else 'fifo'
pairs=sorted(set(int(f.split('-')[-1].split('.')[0]) for f in glob.glob(f'{d}/bench-{res}-{a}-*.json')))
rows={}
for p in pairs:
  try:
    A=json.load(open(f'{d}/bench-{res}-{a}-{p}.json')); B=json.load(open(f'{d}/bench-{res}-{b}-{p}.json'))
  except FileNotFoundError: continue
  for ca,cb in zip(A['configurations'],B['configurations']):
    for ra,rb in zip(ca['rounds'],cb['rounds']):
      rows.setdefault(ca['name'],[]).append((ra['ms_per_token']['mean'],rb['ms_per_token']['mean']))
for n,v in rows.items():
  r=[y/x for x,y in v]
  print(f"{n[:40]:40s} {a} {st.mean(x for x,_ in v):7.2f} {b} {st.mean(y for _,y in v):7.2f}  {b}/{a} median {st.median(r):.3f} range {min(r):.3f}-{max(r):.3f} n={len(r)}")
