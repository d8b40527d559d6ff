#!/usr/bin/env python3
# Every relative Markdown link in README.md, ARCHITECTURE.md and docs/ points at a file
# inside the repository (and, for a #fragment into a .md file, at one of its headings).
# Run from the repository root: python3 docs/check-links.py
import re,os,sys,glob
def slug(h): return re.sub(r'[^\w\- ]','',h.strip().lower()).replace(' ','-')
def anchors(f): return {slug(re.sub(r'[`*]','',l.lstrip('#'))) for l in open(f) if l.startswith('#')}
root=os.path.realpath('.'); bad=n=0
for f in ['README.md','ARCHITECTURE.md']+sorted(glob.glob('docs/*.md')+glob.glob('docs/decisions/*.md')):
    text=re.sub(r'```.*?```','',open(f).read(),flags=re.S)
    for t in re.findall(r'\]\(([^)\s]+)\)',text):
        if re.match(r'[a-z]+:',t): continue
        n+=1; path,_,frag=t.partition('#')
        tgt=os.path.realpath(os.path.join(os.path.dirname(f),path)) if path else os.path.realpath(f)
        ok=os.path.exists(tgt) and tgt.startswith(root+os.sep) and 'shared/' not in t
        if ok and frag and tgt.endswith('.md'): ok=frag in anchors(tgt)
        if not ok: bad+=1; print('BROKEN',f,t)
print(n,'relative links checked,',bad,'broken')
