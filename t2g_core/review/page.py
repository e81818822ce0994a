"""The offline review page: one self-contained HTML file (no network, no external assets).

Spans are highlighted in the response (green = good, red = poor; overlapping text takes the poor colour) and
numbered; below each response every span has an agree / disagree choice and the critique an acceptable / not
choice. The "Download verdicts" button saves a :class:`~t2g_core.review.models.ReviewVerdicts` JSON file with the
answered judgements; ``t2g review import`` reads it back.
"""

from __future__ import annotations

import json
from html import escape

from t2g_core.review.models import ReviewItem, ReviewSample

CSS = """
body{font-family:system-ui,sans-serif;max-width:980px;margin:1.5em auto;padding:0 1em;color:#222}
.item{border:1px solid #ccc;border-radius:6px;padding:.6em 1em;margin:1em 0}
.item h2{font-size:1.05em;margin:.2em 0}.item h2 small{color:#666;font-weight:normal}
pre{white-space:pre-wrap;background:#f6f6f6;padding:.5em;border-radius:4px;margin:.3em 0}
.response{white-space:pre-wrap;font-family:ui-monospace,monospace;background:#fbfbf4;padding:.6em;border-radius:4px;line-height:1.7}
mark.good{background:#b7e4c7}mark.poor{background:#f4a6a6}sup.idx{font-size:.7em;color:#333;font-weight:bold}
table{border-collapse:collapse;margin:.4em 0}td{padding:.2em .6em;border-bottom:1px solid #eee;vertical-align:top}
.tag{padding:0 .4em;border-radius:3px;font-size:.85em}.tag.good{background:#b7e4c7}.tag.poor{background:#f4a6a6}
.unmatched{color:#a00;font-size:.85em}.critique{margin:.5em 0}
#bar{position:sticky;bottom:0;background:#fff;border-top:1px solid #ccc;padding:.6em 0}
button{font-size:1em;padding:.3em 1em}
"""

JS = """
const DATA = JSON.parse(document.getElementById('sample-data').textContent);
function picked(name){const el=document.querySelector('input[name="'+name+'"]:checked');return el?el.value:null;}
function verdicts(){
  const items=[];let done=0;
  DATA.items.forEach((it,n)=>{
    const spans=[];
    it.spans.forEach(s=>{const v=picked('i'+n+'-s'+s.i);
      if(v!==null){spans.push({span_index:s.i,agree:v==='agree',text:s.text});done++;}});
    let crit=null;if(it.critique){const v=picked('i'+n+'-c');if(v!==null){crit=(v==='acceptable');done++;}}
    const comment=document.getElementById('note-'+n).value;
    if(spans.length||crit!==null)items.push({id:it.id,spans:spans,critique_acceptable:crit,comment:comment});
  });
  const reviewer=document.getElementById('reviewer').value||'anonymous';
  return {doc:{reviewer:reviewer,sample_key:DATA.sample_key,items:items},done:done};
}
function progress(){
  document.getElementById('progress').textContent=verdicts().done+' of '+DATA.n_judgements+' judgements made';
}
document.addEventListener('change',progress);
document.getElementById('download').addEventListener('click',()=>{
  const blob=new Blob([JSON.stringify(verdicts().doc,null,2)],{type:'application/json'});
  const a=document.createElement('a');a.href=URL.createObjectURL(blob);a.download='verdicts-'+DATA.sample_key+'.json';
  document.body.appendChild(a);a.click();a.remove();
});
progress();
"""


def highlight(response: str, item: ReviewItem) -> str:
    """The response as HTML with every matched span in a <mark> (class good/poor) and its number after it."""
    located = [s for s in item.spans if s.start is not None and s.end is not None]
    cuts = sorted({0, len(response), *(s.start for s in located), *(s.end for s in located)})
    out = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        text = escape(response[a:b])
        cover = [s for s in located if s.start <= a and b <= s.end]
        if cover:
            cls = "poor" if any(s.label == "negative" for s in cover) else "good"
            ids = " ".join(str(s.span_index) for s in cover)
            text = f'<mark class="{cls}" data-spans="{ids}">{text}</mark>'
        out.append(text + "".join(f'<sup class="idx">{s.span_index}</sup>' for s in located if s.end == b))
    return "".join(out)


def _radio(name: str, value: str, label: str) -> str:
    return f'<label><input type="radio" name="{name}" value="{value}"> {label}</label>'


def _span_rows(n: int, item: ReviewItem) -> str:
    rows = []
    for s in item.spans:
        kind = "good" if s.label == "positive" else "poor"
        where = "" if s.start is not None else ' <span class="unmatched">(not found in the response)</span>'
        choices = (
            _radio(f"i{n}-s{s.span_index}", "agree", "agree")
            + " "
            + _radio(f"i{n}-s{s.span_index}", "disagree", "disagree")
        )
        rows.append(
            f'<tr class="span-row" data-span="{s.span_index}"><td>{s.span_index}</td><td><span class="tag '
            f'{kind}">{kind}</span></td>'
            f"<td>&ldquo;{escape(s.text)}&rdquo;{where}</td><td>{choices}</td></tr>"
        )
    return "<table>" + "".join(rows) + "</table>" if rows else "<p><em>No spans.</em></p>"


def _item_html(n: int, item: ReviewItem) -> str:
    critique = ""
    if item.critique is not None:
        choices = (
            _radio(f"i{n}-c", "acceptable", "acceptable") + " " + _radio(f"i{n}-c", "not_acceptable", "not acceptable")
        )
        critique = f'<div class="critique"><strong>Critique:</strong> {escape(item.critique)}<br>{choices}</div>'
    return (
        f'<div class="item" data-id="{escape(item.id)}"><h2>{escape(item.id)} '
        f"<small>{escape(item.stratum)}</small></h2>"
        f"<details><summary>Prompt</summary><pre>{escape(item.prompt)}</pre></details>"
        f'<div class="response">{highlight(item.response, item)}</div>{_span_rows(n, item)}{critique}'
        f'<label>Note <input id="note-{n}" size="60"></label></div>'
    )


def render_page(sample: ReviewSample, title: str = "text2grad span review") -> str:
    data = {
        "sample_key": sample.key,
        "n_judgements": sample.n_judgements,
        "items": [
            {
                "id": it.id,
                "critique": it.critique is not None,
                "spans": [{"i": s.span_index, "text": s.text} for s in it.spans],
            }
            for it in sample.items
        ],
    }
    payload = json.dumps(data).replace("<", "\\u003c")  # no "</script>" can end the block early
    items = "".join(_item_html(n, it) for n, it in enumerate(sample.items))
    return (
        f'<!doctype html><html lang="en"><head><meta '
        f'charset="utf-8"><title>{escape(title)}</title><style>{CSS}</style></head><body>'
        f"<h1>{escape(title)}</h1><p>Sample <code>{sample.key}</code>: {len(sample.items)} items, "
        f"{sample.n_judgements} judgements. "
        "For each span: is it correctly marked good (green) or poor (red)? For each critique: is it acceptable?</p>"
        f'<label>Reviewer <input id="reviewer" placeholder="your name"></label>{items}'
        '<div id="bar"><button id="download">Download verdicts</button> <span id="progress"></span></div>'
        f'<script type="application/json" id="sample-data">{payload}</script><script>{JS}</script></body></html>'
    )
