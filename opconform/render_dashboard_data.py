"""The dashboard's diff between any two runs: data/site.js (the shared case table, the reasons, the
transition table, the runs' labels), one data/run-N.js per run, and diff.html, whose script loads
the two runs' files (script elements: they load from file:// as from a server) and lists
report.diff's categories.

A run's file holds its cases as run-length-encoded lists (``token*count``, comma-separated): the
gaps between its case indices, one state letter per case, one reason number per case. Runs of one
product hold the same cases in the same states, so a file is a few lines whatever the run's size.
"""

from __future__ import annotations

import json
from pathlib import Path

from opconform import report as rep
from opconform.dashboard import STATE, Site
from opconform.render_dashboard import clause_page, page

CATEGORIES = list(rep.diff({"results": []}, {"results": []}))  # report.diff's, in its order
SHOWN = 500  # rows a category lists before "and N more": the page stays usable for any two runs


def rle(tokens) -> str:
    """``a,a,a,b`` as ``a*3,b``."""
    parts, last, count = [], None, 0
    for token in map(str, tokens):
        if token == last:
            count += 1
            continue
        if last is not None:
            parts.append(last if count == 1 else f"{last}*{count}")
        last, count = token, 1
    if last is not None:
        parts.append(last if count == 1 else f"{last}*{count}")
    return ",".join(parts)


def _script(value) -> str:
    """JSON for a script file; "</" cannot end a script element either."""
    return json.dumps(value, separators=(",", ":")).replace("</", "<\\/")


def write_data(site: Site, out: Path, table: dict) -> list[Path]:
    folder = out / "data"
    folder.mkdir(exist_ok=True)
    shared = {
        "cases": [[key, column, list(clauses)] for key, column, clauses in site.cases],
        "reasons": site.reasons,
        "transitions": table,
        "categories": CATEGORIES,
        "states": STATE,
        "runList": [[run.label, run.name, sorted(run.products)] for run in site.runs],
        "pages": {c: clause_page(c) for _, _, cs in site.cases for c in cs},
    }
    written = [folder / "site.js"]
    written[0].write_text(f"var OPC={_script(shared)};OPC.runs={{}};\n", encoding="utf-8")
    for run in site.runs:
        cases = run.whole()
        gaps = [b - a for a, b in zip([-1, *cases.indices], cases.indices, strict=False)]
        record = {
            "c": rle(gaps),
            "s": rle(cases.states),
            "r": rle(cases.reasons),
            "f": {str(k): v for k, v in run.reruns.items()},
        }
        path = folder / f"run-{run.index}.js"
        path.write_text(f"OPC.runs[{run.index}]={_script(record)};\n", encoding="utf-8")
        written.append(path)
    return written


# Reads ?a=I&b=J (default: OPC.pair), loads both runs' files, and lists each category.
_DIFF_JS = r"""
(function(){
  var query=new URLSearchParams(window.location.search);
  var n=OPC.runsCount, a=OPC.pair[0], b=OPC.pair[1];
  if(query.has('a')){a=Number(query.get('a'));}
  if(query.has('b')){b=Number(query.get('b'));}
  ['a','b'].forEach(function(name){
    var select=document.getElementById('f-'+name);
    OPC.runList.forEach(function(run,i){
      var option=document.createElement('option');option.value=i;
      option.textContent=i+': '+run[0]+' '+run[1]+' ('+run[2].join(', ')+')';select.appendChild(option);
    });
    select.value=String(name==='a'?a:b);
  });
  function expand(text){
    var out=[];if(!text){return out;}
    text.split(',').forEach(function(part){
      var star=part.lastIndexOf('*'),token=part,count=1;
      if(star>0){token=part.slice(0,star);count=+part.slice(star+1);}
      for(var i=0;i<count;i++){out.push(token);}
    });
    return out;
  }
  function table(i){
    var run=OPC.runs[i],gaps=expand(run.c),states=expand(run.s),reasons=expand(run.r),found={},at=-1;
    gaps.forEach(function(gap,k){at+=+gap;found[at]=[states[k],reasons[k]];});
    return found;
  }
  function load(i,done){
    if(OPC.runs[i]){done();return;}
    var script=document.createElement('script');script.src='data/run-'+i+'.js';
    script.onload=done;
    script.onerror=function(){
      document.getElementById('js-errors').textContent+='cannot load data/run-'+i+'.js\n';
    };
    document.head.appendChild(script);
  }
  function cell(tag,html){var el=document.createElement(tag);el.innerHTML=html;return el;}
  function esc(s){return String(s).replace(/[&<>"']/g,function(c){return '&#'+c.charCodeAt(0)+';';});}
  function show(){
    var before=table(a),after=table(b),keys={},groups={},out=document.getElementById('changes');
    Object.keys(before).concat(Object.keys(after)).forEach(function(k){keys[k]=1;});
    Object.keys(keys).map(Number).sort(function(x,y){return x-y;}).forEach(function(k){
      var was=before[k]||['.','0'],now=after[k]||['.','0'];
      var differ=(was[0]!=='.'&&now[0]!=='.'&&was[1]!==now[1])?'1':'0';
      var category=OPC.transitions[was[0]+now[0]+differ];
      if(category){(groups[category]=groups[category]||[]).push([k,was,now]);}
    });
    var total=0;
    OPC.categories.forEach(function(category){
      var items=groups[category]||[];total+=items.length;if(!items.length){return;}
      out.appendChild(cell('h2',esc(category)+' ('+items.length+')'));
      var list=document.createElement('table');list.className='diff';list.dataset.category=category;
      items.slice(0,OPC.shown).forEach(function(item){
        var c=OPC.cases[item[0]],clauses=c[2].map(function(id){
          return '<a href="'+OPC.pages[id]+'">'+esc(id)+'</a>';
        });
        var html='<td>'+clauses.join(', ')+'</td><td><code>'+esc(c[0])+'</code></td><td>'
          +esc(OPC.states[item[1][0]]||'absent')+' &rarr; '+esc(OPC.states[item[2][0]]||'absent')+'</td>';
        var rerun=OPC.runs[b].f[item[0]];
        if(rerun&&category.indexOf('new')===0){html+='<td>rerun: <code>'+esc(rerun)+'</code></td>';}
        if(item[1][1]!==item[2][1]&&item[1][0]!=='.'&&item[2][0]!=='.'){
          html+='<td>reason: '+esc(OPC.reasons[+item[1][1]])+' &rarr; '+esc(OPC.reasons[+item[2][1]])+'</td>';
        }
        list.appendChild(cell('tr',html));
      });
      out.appendChild(list);
      if(items.length>OPC.shown){out.appendChild(cell('p','and '+(items.length-OPC.shown)+' more'));}
    });
    if(!total){out.appendChild(cell('p','no changes'));}
    document.documentElement.setAttribute('data-opconform-ready','1');
  }
  var bad=[a,b].filter(function(i){return !(Number.isInteger(i)&&i>=0&&i<n);});
  if(n<1||bad.length){
    var why=n?'no run '+esc(bad.join(', '))+': choose two':'no runs';
    document.getElementById('changes').appendChild(cell('p',why));
    document.documentElement.setAttribute('data-opconform-ready','1');return;
  }
  load(a,function(){load(b,show);});
})();
"""


def _default_pair(site: Site) -> list[int]:
    """Without ?a=&b=: the latest run against the run before it of the same product (the last two
    runs of the whole fleet are likely two machines, whose diff is every case added and removed)."""
    if not site.runs:
        return [0, 0]
    latest = site.runs[-1]
    pairs = [site.previous(site.products[p]) for p in latest.products.values()]
    earlier = [pair[0].index for pair in pairs if pair]
    return [max(earlier, default=latest.index), latest.index]


def diff_html(site: Site) -> str:
    body = [
        "<p>Any two runs, case by case, in <code>opconform diff</code>'s categories (new failures with ",
        "their rerun lines, new SHOULD failures, fixes, changed skips and reasons, added, removed).</p>",
        "<form method='get' action='diff.html'><label>old <select id='f-a' name='a'></select></label> ",
        "<label>new <select id='f-b' name='b'></select></label> <button>diff</button></form>",
        "<div id='changes'></div><script src='data/site.js'></script>",
        f"<script>OPC.runsCount={len(site.runs)};OPC.shown={SHOWN};OPC.pair={_default_pair(site)};"
        f"{_DIFF_JS}</script>",
    ]
    # Ready once both runs are loaded and listed, not at the page's end.
    return page("diff two runs", body, ready=False)
