import sys, numpy as np
path=sys.argv[1]; target=[int(a) for a in sys.argv[2:]]
with open(path,"rb") as f:
    f.seek(48); rec=np.fromfile(f,dtype="<u8")
kind=rec>>np.uint64(56); faults=rec[(kind==1)|(kind==2)]
page=(faults&np.uint64((1<<40)-1)).astype(np.int64)
cell=((faults>>np.uint64(40))&np.uint64(0xFF)).astype(np.int64)
x=page*4096+cell*16
n=len(x); lag=64
best=np.full(n,1<<62,dtype=np.int64); bx=np.zeros(n,dtype=np.int64)
for k in range(1,lag+1):
    d=np.abs(page[k:]-page[:-k]); better=d<best[k:]
    best[k:]=np.where(better,d,best[k:]); bx[k:]=np.where(better,x[k:]-x[:-k],bx[k:])
for t in target:
    sel=bx[best==t]
    v,c=np.unique(sel,return_counts=True); o=np.argsort(-c)[:8]
    print(t, len(sel), [(int(v[i]),int(c[i])) for i in o])
