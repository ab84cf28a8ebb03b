"""The dashboard's pages: static HTML in report.html's style (its CSS, cell classes, cell texts and
failure records), linked relatively, no server, no network.

index.html opens with each product's new failures since its previous run (the first screen),
then the products and the families; family-F.html is the clause x product matrix of family F
(each product's latest run, both levels); product-ID.html a product's runs (dates, commits) and
its clauses' history; clause-ID.html a clause's cells, history, failing examples and rerun lines;
diff.html (``opconform.render_dashboard_data``) any two runs. ``opconform.commands.dashboard``
writes them.
"""

from __future__ import annotations

import html
import re

from opconform import ratios, render
from opconform import render_failures as failures
from opconform import report as rep
from opconform.dashboard import CODE, STATE, Product, Run, Site, diff_runs

esc = html.escape
HISTORY_RUNS = 40  # the runs a history strip shows, newest last: a page stays small with hundreds
CSS = (
    render.CSS
    + """
nav{margin-bottom:1em}nav a{margin-right:1.2em}
.regress{border:2px solid #c33;background:#fff4f4;padding:.3em .8em;margin:.5em 0}
.quiet{border:1px solid #9c9;background:#f4fff4;padding:.3em .8em}
td.h{width:9px;height:14px;padding:0;font-size:9px;text-align:center}
small,.muted{color:#666}#js-errors:empty{display:none}
"""
)
# Records any error in the page, so a headless browser check can read it from the DOM (as report.html).
ERRORS_JS = (
    "<pre id='js-errors'></pre><script>window.addEventListener('error',function(e){"
    "document.getElementById('js-errors').textContent+=String(e.message)+'\\n';});</script>"
)
READY_JS = "<script>document.documentElement.setAttribute('data-opconform-ready','1');</script>"


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def clause_page(clause: str) -> str:
    return f"clause-{slug(clause)}.html"


def family_page(family: str) -> str:
    return f"family-{slug(family)}.html"


def product_page(product: Product) -> str:
    return f"product-{product.id}.html"


def page(title: str, body: list[str], *, ready: bool = True) -> str:
    return "".join([
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>", ERRORS_JS,
        "<nav><a href='index.html'>dashboard</a><a href='diff.html'>diff two runs</a></nav>",
        f"<h1>{esc(title)}</h1>", *body, READY_JS if ready else "", "</body></html>",
    ])  # fmt: skip


def _cell(cell: dict | None, *, clause: str | None = None) -> str:
    if cell is None:
        return "<td class='st none'>-</td>"
    text = esc(cell["text"])
    if clause:
        text = f"<a href='{clause_page(clause)}'>{text}</a>"
    title = esc("; ".join(cell["reasons"]))
    return f"<td class='st {render.STATE_CLASS[cell['state']]}' title='{title}'>{text}</td>"


def _strip(site: Site, product: Product, clause: str) -> str:
    """The clause's cell in each of the product's last HISTORY_RUNS runs, oldest first: one cell per
    stretch of runs in one state (a history that holds still costs one cell, not one per run)."""
    stretches: list[list] = []  # [letter, first run, last run, count]
    for index in product.runs[-HISTORY_RUNS:]:
        run = site.runs[index]
        code = run.worst.get((product.column, clause)) or ""
        if stretches and stretches[-1][0] == code:
            stretches[-1][2:] = [run, stretches[-1][3] + 1]
        else:
            stretches.append([code, run, run, 1])
    cells = []
    for code, first, last, count in stretches:
        state = STATE.get(code)
        span = first.label if count == 1 else f"{first.label} to {last.label} ({count} runs)"
        css, title = render.STATE_CLASS[state] if state else "none", esc(f"{span}: {state or 'not run'}")
        cells.append(f"<td class='h {css}' colspan='{count}' title='{title}'>{code}</td>")
    return "".join(cells)


def _verdict(run: Run, column: str) -> str:
    return render.summary_line(column, run.counts.get(column) or {}).partition(": ")[2]


def _case_link(site: Site, index: int) -> str:
    key, _, clauses = site.cases[index]
    links = ", ".join(f"<a href='{clause_page(c)}'>{esc(c)}</a>" for c in clauses)
    return f"{links or esc(rep.NO_CLAUSE)} <code>{esc(key)}</code>"


def _regressions(site: Site, table: dict) -> list[str]:
    """Each product's new failures since its previous run, most first: the dashboard's first screen."""
    found = []
    for product in site.products.values():
        pair = site.previous(product)
        if pair is None:
            continue
        changes = diff_runs(site, *pair, table, column=product.column)
        new, should = changes.get("new failures", []), changes.get("new SHOULD failures", [])
        if new or should:
            found.append((len(new), len(should), product, pair, new, should))
    found.sort(key=lambda f: (-f[0], -f[1], f[2].label))
    parts = ["<section id='regressions'><h2>New failures in each product's latest run</h2>"]
    if not found:
        parts.append("<p class='quiet' id='no-regressions'>No product's latest run has a new failure.</p>")
    else:
        must = sum(1 for f in found if f[0])
        parts.append(
            f"<p id='regression-count'>{len(found)} of {len(site.products)} products have new failures "
            f"in their latest run ({must} of them MUST failures), most first.</p>"
        )
    for must, should_count, product, (old, new_run), new, should in found:
        by_key = {ratios.node_key(r): r for r in product.latest.get("failures", [])}
        parts.append(
            f"<div class='regress' data-product='{esc(product.id)}'><h3><a href='{product_page(product)}'>"
            f"{esc(product.label)}</a>: {must} new MUST failure{'s' * (must != 1)}, {should_count} new "
            f"SHOULD failure{'s' * (should_count != 1)}</h3><p>run {esc(new_run.label)} "
            f"(<code>{esc(new_run.name)}</code>) against {esc(old.label)}: "
            f"<a href='diff.html?a={old.index}&amp;b={new_run.index}'>the whole diff</a></p><ul>"
        )
        for level, items in (("MUST", new), ("SHOULD", should)):
            for index, was, now in items:
                result = by_key.get(site.cases[index][0]) or {}
                verdict = (failures.failure_lines(result) or [""])[0] if result else ""
                rerun = new_run.reruns.get(index)
                parts.append(
                    f"<li class='regression' data-level='{level}'>{level}: {_case_link(site, index)} "
                    f"{esc(STATE.get(was, 'absent'))} &rarr; <b>{esc(STATE[now])}</b>"
                    + (f"<br>{esc(verdict)}" if verdict else "")
                    + (f"<br>rerun: <code>{esc(rerun)}</code>" if rerun else "")
                    + "</li>"
                )
        parts.append("</ul></div>")
    parts.append("</section>")
    return parts


def index_html(site: Site, table: dict) -> str:
    dates = [r.created for r in site.runs if r.created]
    span = f", {dates[0]} to {dates[-1]}" if dates else ""
    body = [f"<p>{len(site.runs)} runs, {len(site.products)} products{esc(span)}.</p>"]
    body += _regressions(site, table)
    body.append("<h2>Products (each one's latest run)</h2><table id='products'><tr><th>product</th>")
    body.append("<th>runs</th><th>latest run</th><th>verdict</th></tr>")
    for product in sorted(site.products.values(), key=lambda p: p.label):
        run = site.runs[product.runs[-1]]
        body.append(
            f"<tr><td><a href='{product_page(product)}'>{esc(product.label)}</a></td>"
            f"<td>{len(product.runs)}</td><td>{esc(run.label)}</td>"
            f"<td>{esc(_verdict(run, product.column))}</td></tr>"
        )
    body.append("</table><h2>Families: clause x product matrices</h2><ul id='families'>")
    for family, clauses in site.families().items():
        broken = sum(
            1
            for p in site.products.values()
            for c in clauses
            if (p.latest.get("cells", {}).get(c) or {}).get("state") in rep.BROKEN
        )
        note = f" ({broken} MUST cells broken)" if broken else ""
        link = f"<a href='{family_page(family)}'>{esc(family)}</a>"
        body.append(f"<li>{link}: {len(clauses)} clauses{note}</li>")
    body.append("</ul>")
    return page("opconform dashboard", body)


def family_html(site: Site, family: str, clauses: list[str]) -> str:
    products = [
        p
        for p in sorted(site.products.values(), key=lambda p: p.label)
        if any(c in p.latest.get("cells", {}) for c in clauses)
    ]
    body = ["<p>Each product's latest run; a cell links to its clause's page.</p>"]
    body.append("<table id='matrix'><thead><tr><th>clause</th><th>level</th>")
    body += [f"<th><a href='{product_page(p)}'>{esc(p.label)}</a></th>" for p in products]
    body.append("</tr></thead><tbody>")
    for clause in clauses:
        info = site.clauses.get(clause) or {}
        body.append(
            f"<tr><td title='{esc(info.get('title', ''))}'>"
            f"<a href='{clause_page(clause)}'>{esc(clause)}</a></td>"
            f"<td>{esc(info.get('level') or rep.MUST)}</td>"
        )
        cells = [_cell(p.latest.get("cells", {}).get(clause), clause=clause) for p in products]
        if info.get("rule"):  # a rule of the suite (the tolerance table): applied by every case
            cells = [c.replace(">-<", ">rule<") for c in cells]
        body += cells
        body.append("</tr>")
    body.append(f"</tbody></table><p><small>{esc(render.LEGEND)}; {esc(render.RULE_LEGEND)}</small></p>")
    return page(f"{family}: clause x product", body)


def product_html(site: Site, product: Product, table: dict) -> str:
    facts = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in product.fields.items())
    body = [f"<table id='stack'><tr><th>column</th><td>{esc(product.column)}</td></tr>{facts}</table>"]
    body.append("<h2>Runs, newest first</h2><table id='runs'><tr><th>date</th><th>commit</th><th>host</th>")
    body.append("<th>report</th><th>verdict</th><th>against the run before</th></tr>")
    runs = product.runs
    for position in range(len(runs) - 1, -1, -1):
        run = site.runs[runs[position]]
        change = ""
        if position:
            old = site.runs[runs[position - 1]]
            counts = {k: len(v) for k, v in diff_runs(site, old, run, table, column=product.column).items()}
            text = ", ".join(f"{n} {k}" for k, n in counts.items()) or "no changes"
            change = f"<a href='diff.html?a={old.index}&amp;b={run.index}'>{esc(text)}</a>"
        body.append(
            f"<tr><td>{esc(run.created or '-')}</td><td><code>{esc(run.commit or '-')}</code></td>"
            f"<td>{esc(run.host or '-')}</td><td><code>{esc(run.name)}</code></td>"
            f"<td>{esc(_verdict(run, product.column))}</td><td>{change}</td></tr>"
        )
    shown = min(len(runs), HISTORY_RUNS)
    body.append(f"</table><h2>Clause history (the last {shown} runs, oldest first)</h2>")
    body.append("<table id='history'><tr><th>clause</th><th>level</th><th colspan='99'>runs</th></tr>")
    seen = {row for i in runs for (column, row) in site.runs[i].worst if column == product.column}
    for clause in [c for c in site.clauses if c in seen] + sorted(seen - site.clauses.keys()):
        level = (site.clauses.get(clause) or {}).get("level") or rep.MUST
        body.append(
            f"<tr><td><a href='{clause_page(clause)}'>{esc(clause)}</a></td><td>{esc(level)}</td>"
            f"{_strip(site, product, clause)}</tr>"
        )
    body.append(f"</table><p><small>{esc(_letters())}</small></p>")
    return page(product.label, body)


def _letters() -> str:
    return "letters: " + ", ".join(f"{code} {state}" for state, code in CODE.items()) + "; empty: not run"


def clause_html(site: Site, clause: str) -> str:
    info = site.clauses.get(clause) or {}
    facts = [f"level {info.get('level') or rep.MUST}", f"family {info.get('family') or '-'}"]
    facts += [f"kind {info['kind']}"] if info.get("kind") else []
    body = [f"<p id='clause-facts'>{esc(info.get('title', ''))} ({esc('; '.join(facts))})</p>"]
    products = [p for p in sorted(site.products.values(), key=lambda p: p.label) if _ran(site, p, clause)]
    body.append("<table id='products'><tr><th>product</th><th>latest</th><th colspan='99'>history</th></tr>")
    for product in products:
        body.append(
            f"<tr><td><a href='{product_page(product)}'>{esc(product.label)}</a></td>"
            f"{_cell(product.latest.get('cells', {}).get(clause))}{_strip(site, product, clause)}</tr>"
        )
    body.append("</table><h2>Failing examples (each product's latest run)</h2><div id='failures'>")
    count = 0
    for product in products:
        for result in product.latest.get("failures", []):
            failure = result.get("failure") or {}
            if (failure.get("clause") or (result.get("clauses") or [None])[0]) != clause:
                continue
            count += 1
            verdict, *rest = failures.failure_lines(result) or [result["nodeid"]]
            body.append(
                f"<details class='failure' open><summary>{esc(product.column)}: {esc(verdict)}</summary>"
                f"<p>{esc(result['nodeid'])}: {esc('; '.join(failures.failure_facts(result, rel=True)))}</p>"
                f"<pre>{esc(chr(10).join(line.strip() for line in rest))}</pre></details>"
            )
    if not count:
        body.append("<p>None: no product's latest run fails this clause.</p>")
    body.append("</div>")
    return page(clause, body)


def _ran(site: Site, product: Product, clause: str) -> bool:
    return any((product.column, clause) in site.runs[i].worst for i in product.runs)


def pages(site: Site, table: dict) -> dict[str, str]:
    """File name -> HTML of every page but diff.html (opconform.render_dashboard_data)."""
    found = {"index.html": index_html(site, table)}
    for family, clauses in site.families().items():
        found[family_page(family)] = family_html(site, family, clauses)
    for product in site.products.values():
        found[product_page(product)] = product_html(site, product, table)
    clauses = dict.fromkeys([*site.clauses, *(c for _, _, cs in site.cases for c in cs)])
    for clause in clauses:
        found[clause_page(clause)] = clause_html(site, clause)
    return found
