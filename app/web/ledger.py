"""The ledger page: the v1 document rendered as HTML whose visible text, top to bottom, is the spec's ledger."""

from __future__ import annotations

from html import escape
from typing import Any
from urllib.parse import quote

from app.web.layout import page, time_tag
from loaders.rows import STATUSES


def _spaces(name: str) -> str:
    return name.replace("_", " ")


def _paper_link(paper: dict[str, Any] | None) -> str:
    if paper is None:
        return ""
    return f'<a href="/paper/{quote(paper["arxiv_id"])}">{escape(paper["title"])}</a>'


def _observed(text: str | None) -> str:
    return f", observed {time_tag(text)}" if text is not None else ""


def _lane(lane: dict[str, Any]) -> str:
    return (
        f'<li class="lane lane-{lane["state"]}">'
        f'<p><strong>{lane["state"]} {lane["records_observed"]} of {lane["denominator"]} {_spaces(lane["lane"])}</strong></p>'
        f'<p>{escape(lane["note"])}</p>'
        f'<p class="source">Source: {escape(lane["source"])}{_observed(lane["source_observed_at"])}</p>'
        "</li>"
    )


def _notice(notice: dict[str, Any]) -> str:
    parts = ['<h4>Source-reported events for the cited work</h4>']
    if notice["state"] == "measured":
        parts.append(f'<p>{escape(notice["observation"])}</p>')
    else:
        parts.append(f'<p class="muted">Unavailable: {_spaces(notice["reason"])}.</p>')
    if notice["events"]:
        parts.append('<ul class="events">')
        for event in notice["events"]:
            reported = time_tag(event["reported_at"]) if event["reported_at"] else "an unknown date"
            parts.append(f'<li class="event event-{event["event_type"]}" role="alert"><strong>{escape(event["event_type"])}</strong>'
                         f' reported by {escape(event["source"])} on {reported}</li>')
        parts.append("</ul>")
    return "".join(parts)


def _role(role: str, paper: dict[str, Any] | None) -> str:
    """A paper link on a line of its own; the stylesheet labels it (citing / cited) without adding text."""
    link = _paper_link(paper)
    return f'<span class="{role}">{link}</span>' if link else ""


def _observation(o: dict[str, Any], direction: str) -> str:
    c = o["citation"]
    if direction == "inbound":
        sentence = f'{escape(c["citing_paper"]["title"])} cites this paper.'
    else:
        sentence = f'This paper cites {escape(c["cited_work"]["title"] or "an untitled work")}.'
    r = o["resolution"]
    resolver = escape(r["resolver_source"]) if r["resolver_source"] else "no resolver link"
    flagged = " flagged" if o["standing_notice"]["events"] else ""
    return (
        f'<li class="observation{flagged}" id="obs-{o["observation_id"]}">'
        f'<h3>Observation <code>{o["observation_id"]}</code> · {direction}</h3>'
        f"<p>{sentence}</p>"
        f'<p class="papers">{_role("citing", c["citing_paper"])} {_role("cited", c["cited_paper"])}</p>'
        f'<p>Reference {c["reference_index"]}</p>'
        f'<p>Resolution: {_spaces(r["status"])}; {resolver}, observed {time_tag(r["observed_at"])}</p>'
        f'{_notice(o["standing_notice"])}'
        "</li>"
    )


def _events_banner(document: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for o in document["inbound"] + document["outbound"]:
        for event in o["standing_notice"]["events"]:
            counts[event["event_type"]] = counts.get(event["event_type"], 0) + 1
    if not counts:
        return ""
    listed = ", ".join(f"{n} {_spaces(t)}" for t, n in sorted(counts.items()))
    return (f'<aside class="alert" role="alert"><strong>Source-reported events on cited works:</strong> {listed}. '
            f'<a href="#outbound">See the flagged observations.</a></aside>')


def render_ledger(document: dict[str, Any]) -> str:
    paper = document["paper"]
    arxiv_id = paper["arxiv_id"]
    rr = document["reference_resolution"]
    counts = "".join(f"<div><dt>{_spaces(s)}</dt><dd>{rr['state_counts'][s]}</dd></div>" for s in STATUSES)
    measurements = "".join(
        f'<li><data class="count" value="{m["count"]}">{m["count"]}</data> '
        f'<span>{escape(m["source"])}{_observed(m["observed_at"])}</span></li>'
        for m in document["external_citation_measurements"]
    ) or ""
    outbound = "".join(_observation(o, "outbound") for o in document["outbound"])
    inbound = "".join(_observation(o, "inbound") for o in document["inbound"])
    body = f"""
{_events_banner(document)}
<article class="ledger">
<header>
<p class="kicker">Paper Citation Record · LEDGER</p>
<h1>{escape(paper["title"])}</h1>
<p class="thesis">{escape(document["thesis"])}</p>
<p class="refusal">{escape(document["refusal"])}</p>
<p class="meta"><code>{escape(document["schema"])}</code><br><a href="/paper/{quote(arxiv_id)}">{escape(arxiv_id)} v{paper["latest_version"]}</a></p>
</header>
<section aria-labelledby="coverage"><h2 id="coverage">Coverage vector</h2>
<ul class="lanes">{"".join(_lane(lane) for lane in document["coverage"])}</ul></section>
<section aria-labelledby="resolution"><h2 id="resolution">Reference resolution</h2>
<p>{rr["displayed"]} of {rr["total_outbound_references"]} outbound references displayed</p>
<dl class="counts">{counts}</dl></section>
<section aria-labelledby="external"><h2 id="external">External citation measurements</h2>
{f'<ul class="measurements">{measurements}</ul>' if measurements else '<p class="muted">No external citation measurement is recorded.</p>'}</section>
<section aria-labelledby="outbound"><h2 id="outbound">Outbound references</h2>
{f'<ol class="observations">{outbound}</ol>' if outbound else '<p class="muted">No outbound reference observations are available for this paper version.</p>'}</section>
<section aria-labelledby="inbound"><h2 id="inbound">Pith citing papers</h2>
{f'<ol class="observations">{inbound}</ol>' if inbound else '<p class="muted">No Pith citing paper is itemized.</p>'}</section>
</article>
<p class="formats">As of {time_tag(document["as_of"])} ·
<a href="{document["links"]["json"]}?as_of={quote(document["as_of"])}">JSON</a> ·
<a href="{document["links"]["integrity"]}?as_of={quote(document["as_of"])}">integrity</a> ·
<a href="{document["links"]["paper"]}">paper</a> · <a href="{document["links"]["evidence"]}">evidence</a></p>
"""
    return page(f"{paper['title']} · citation record", body)
