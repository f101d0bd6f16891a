//! The HTML report: every result's section (each kind's module writes its
//! own) in one self-contained page with inline SVG figures, the machine
//! once at the top and a summary of the bench results.

use crate::bench::BenchDoc;
use crate::doc::Doc;
use crate::words::{esc, machine_line};
use crate::ReportError;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

type Result<T> = std::result::Result<T, ReportError>;

/// Click a column's header to sort the table by it (numbers as numbers).
const SORT_JS: &str = "document.querySelectorAll('table.sortable th').forEach(function(th){th.style.cursor='pointer';th.title='click to sort';th.onclick=function(){var t=th.closest('table'),b=t.tBodies[0],i=th.cellIndex,d=th.dataset.d=th.dataset.d=='1'?'-1':'1';var k=function(r){var c=r.cells[i];var s=c?c.textContent:'';var n=parseFloat(s);return isNaN(n)?s:n;};Array.from(b.rows).sort(function(x,y){var a=k(x),c=k(y);return (a<c?-1:a>c?1:0)*d;}).forEach(function(r){b.appendChild(r);});};});";

/// Write results (each with the file or command it came from) as one
/// offline HTML page.
pub fn write_html(docs: &[(PathBuf, Doc)], out: &Path) -> Result<()> {
    // The machine once, at the top; a section measured elsewhere says so.
    let line = |d: &Doc| d.machine().map(machine_line).unwrap_or_default();
    let machine = docs.first().map(|d| line(&d.1)).unwrap_or_default();
    let benches: Vec<&BenchDoc> = docs
        .iter()
        .filter_map(|d| match &d.1 {
            Doc::Bench(b) => Some(&**b),
            _ => None,
        })
        .collect();
    let mut body = String::new();
    let _ = writeln!(body, "<p class=machine>Machine: {}</p>", esc(&machine));
    crate::bench::html::summary(&benches, &mut body);
    for (p, doc) in docs {
        let _ = writeln!(
            body,
            "<section><p class=src>{}</p>",
            esc(&p.display().to_string())
        );
        let m = line(doc);
        if m != machine {
            let _ = writeln!(body, "<p class=machine>Measured on: {}</p>", esc(&m));
        }
        match doc {
            Doc::Bench(b) => crate::bench::html::section(b, &mut body)?,
            Doc::Probe(r) => crate::probe::html::section(r, &mut body)?,
            Doc::Xy(r) => crate::xy::section(r, &mut body)?,
            Doc::Policies(r) => crate::policies::section(r, &mut body)?,
            Doc::Matrix(r) => crate::matrix::section(r, &mut body)?,
        }
        body.push_str("</section>\n");
    }
    let html = format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>farmem report</title><style>\
         body{{font-family:'DejaVu Sans',sans-serif;max-width:1080px;margin:2em auto;color:#222}}\
         table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:4px 10px;text-align:right}}\
         td.l,td:first-child{{text-align:left}}th{{background:#f4f4f4}}td.fail{{color:#b00;font-weight:bold}}\
         .good{{color:#060}}.bad{{color:#b00}}.m,.src{{color:#666;font-size:90%}}.machine{{font-size:95%}}\
         svg{{display:block;max-width:100%;height:auto;margin:1em 0}}\
         section{{border-top:2px solid #eee;margin-top:2em}}</style></head><body><h1>farmem report</h1>\n{body}\
         <script>{SORT_JS}</script></body></html>\n"
    );
    std::fs::write(out, html).map_err(|e| ReportError::Write {
        path: out.display().to_string(),
        why: e.to_string(),
    })?;
    Ok(())
}
