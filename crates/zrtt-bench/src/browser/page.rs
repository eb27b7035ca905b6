//! The page Chromium loads: the `plt` scenario's 31 objects (same hosts,
//! paths and sizes), with images a browser can decode and a script that
//! writes the browser's own Navigation Timing into the DOM, which the
//! scenario reads over DevTools.

use anyhow::{anyhow, Context, Result};
use serde_json::Value;

use crate::plt::{objects, HOSTS};

/// What the page's script writes before its JSON (split in the script's
/// source, so that only the result matches).
pub(super) const MARKER: &str = "ZRTT-TIMING ";

/// Colours (blue, green, red) per host, so the screenshot shows where each
/// image came from.
const HOST_RGB: [[u8; 3]; 3] = [[40, 90, 200], [40, 160, 80], [220, 110, 30]];

/// Side of the square images, pixels (24-bit: 768 bytes of pixels, below
/// the smallest object).
const SIDE: usize = 16;

/// The page HTML: every object as `<img src="//host/path">` (scheme
/// relative, so `http://` and `https://` loads fetch the same objects the
/// same way), the `plt` page's filler text, and the timing script.
pub(super) fn html() -> String {
    let mut s = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>zrtt browser lab</title>\n\
         <style>body{font-family:sans-serif;margin:12px}img{width:64px;height:64px;margin:3px;image-rendering:pixelated}\
         pre{white-space:pre-wrap;word-break:break-all;font-size:12px;background:#eee;padding:6px}p.f{font-size:9px;color:#888}</style></head><body>\n\
         <h1>zrtt lab browser: the HTML and 30 images on three hosts</h1>\n<p id=\"summary\">loading</p>\n<pre id=\"zrtt-timing\">loading</pre>\n<div>\n",
    );
    for (h, path, _) in objects() {
        s.push_str(&format!(
            "<img src=\"//{}{path}\" alt=\"{}{path}\">\n",
            HOSTS[h], HOSTS[h]
        ));
    }
    s.push_str("</div>\n<p class=\"f\">");
    s.push_str(&"filler text of a real page. ".repeat(300));
    s.push_str("</p>\n<script>\n");
    s.push_str(SCRIPT);
    s.push_str("</script>\n</body></html>\n");
    s
}

/// Runs in the load event (so `loadEventStart` is set, and the DOM read
/// after `Page.loadEventFired` has the result).
const SCRIPT: &str = r#"addEventListener('load', function () {
  var n = performance.getEntriesByType('navigation')[0];
  var r = performance.getEntriesByType('resource');
  var imgs = Array.from(document.images);
  var t = {
    load_ms: n.loadEventStart,
    dom_content_loaded_ms: n.domContentLoadedEventEnd,
    html_response_start_ms: n.responseStart,
    html_connect_ms: n.connectEnd - n.connectStart,
    last_response_end_ms: Math.max.apply(null, r.map(function (e) { return e.responseEnd; }).concat([0])),
    next_hop_protocol: n.nextHopProtocol,
    url: location.href,
    resources: r.length,
    images: imgs.length,
    images_loaded: imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length,
    waterfall: r.map(function (e) {
      return [new URL(e.name).host, Math.round(e.startTime), Math.round(e.connectEnd - e.connectStart),
        Math.round(e.responseStart), Math.round(e.responseEnd)];
    })
  };
  document.getElementById('summary').textContent = location.href + ' loaded in ' +
    Math.round(n.loadEventStart) + ' ms (Navigation Timing loadEventStart), ' +
    t.images_loaded + ' of ' + t.images + ' images';
  document.getElementById('zrtt-timing').textContent = 'ZRTT-' + 'TIMING ' + JSON.stringify(t);
});
"#;

/// A 24-bit BMP of exactly `size` bytes (at least 822): a [`SIDE`]-pixel
/// square in the host's colour, shaded by the object's index, with a dark
/// border; the padding sits between the headers and the pixels (the
/// pixel offset says where they start), so the file is a valid image of
/// the `plt` object's size.
pub(super) fn bmp(host: usize, index: usize, size: usize) -> Vec<u8> {
    let pixels = SIDE * SIDE * 3;
    let offset = size - pixels;
    let mut b = Vec::with_capacity(size);
    b.extend_from_slice(b"BM");
    b.extend_from_slice(&(size as u32).to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&(offset as u32).to_le_bytes());
    b.extend_from_slice(&40u32.to_le_bytes());
    b.extend_from_slice(&(SIDE as i32).to_le_bytes());
    b.extend_from_slice(&(SIDE as i32).to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&24u16.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes()); // no compression
    b.extend_from_slice(&(pixels as u32).to_le_bytes());
    b.extend_from_slice(&2835u32.to_le_bytes());
    b.extend_from_slice(&2835u32.to_le_bytes());
    b.extend_from_slice(&[0; 8]);
    b.resize(offset, 0);
    let [r, g, bl] = HOST_RGB[host % HOST_RGB.len()];
    let shade = |c: u8| (c as usize + (index % 10) * 12).min(255) as u8;
    for y in 0..SIDE {
        for x in 0..SIDE {
            let edge = x == 0 || y == 0 || x == SIDE - 1 || y == SIDE - 1;
            let px = if edge {
                [20, 20, 20]
            } else {
                [shade(bl), shade(g), shade(r)]
            };
            b.extend_from_slice(&px);
        }
    }
    b
}

/// What the page's script reported, from the page's DOM.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Timing {
    /// `loadEventStart`: the page-load time, ms from the navigation's start.
    pub(super) load_ms: f64,
    pub(super) dom_content_loaded_ms: f64,
    pub(super) html_response_start_ms: f64,
    pub(super) last_response_end_ms: f64,
    pub(super) resources: u64,
    pub(super) images: u64,
    pub(super) images_loaded: u64,
    /// Everything the script wrote.
    pub(super) raw: Value,
}

/// Finds the script's result in `dom` (the marker in the `<pre>`).
pub(super) fn parse_timing(dom: &str) -> Result<Timing> {
    let at = dom
        .find(MARKER)
        .ok_or_else(|| anyhow!("the page wrote no timing (did it load?)"))?;
    let rest = &dom[at + MARKER.len()..];
    let end = rest.find("</pre>").unwrap_or(rest.len());
    // A text node: the serializer escapes only &, < and >.
    let text = rest[..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let raw: Value = serde_json::from_str(&text).context("the page's timing JSON")?;
    let num = |k: &str| {
        raw[k]
            .as_f64()
            .ok_or_else(|| anyhow!("timing without {k}: {raw}"))
    };
    let count = |k: &str| {
        raw[k]
            .as_u64()
            .ok_or_else(|| anyhow!("timing without {k}: {raw}"))
    };
    let t = Timing {
        load_ms: num("load_ms")?,
        dom_content_loaded_ms: num("dom_content_loaded_ms")?,
        html_response_start_ms: num("html_response_start_ms")?,
        last_response_end_ms: num("last_response_end_ms")?,
        resources: count("resources")?,
        images: count("images")?,
        images_loaded: count("images_loaded")?,
        raw: raw.clone(),
    };
    if t.load_ms <= 0.0 {
        return Err(anyhow!("loadEventStart is not set: {raw}"));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_lists_every_object_without_the_marker() {
        let h = html();
        assert_eq!(h.matches("<img src=\"//").count(), objects().len());
        // The script's source does not contain the marker as written.
        assert!(!h.contains(MARKER));
        assert!(parse_timing(&h).is_err());
    }

    #[test]
    fn images_have_the_objects_sizes() {
        for (h, _, size) in objects() {
            let b = bmp(h, 3, size);
            assert_eq!(b.len(), size);
            assert_eq!(&b[..2], b"BM");
            assert_eq!(
                u32::from_le_bytes(b[2..6].try_into().unwrap()) as usize,
                size
            );
            let off = u32::from_le_bytes(b[10..14].try_into().unwrap()) as usize;
            assert_eq!(size - off, SIDE * SIDE * 3);
        }
    }

    #[test]
    fn timing_from_a_dumped_dom() {
        let dom = "<pre id=\"zrtt-timing\">ZRTT-TIMING {\"load_ms\":812.5,\"dom_content_loaded_ms\":300,\
                   \"html_response_start_ms\":250.1,\"html_connect_ms\":0,\"last_response_end_ms\":800,\
                   \"next_hop_protocol\":\"http/1.1\",\"url\":\"http://www.example.com/?a=1&amp;b=2\",\
                   \"resources\":30,\"images\":30,\"images_loaded\":30}</pre><script>'ZRTT-' + 'TIMING '</script>";
        let t = parse_timing(dom).unwrap();
        assert_eq!(t.load_ms, 812.5);
        assert_eq!((t.resources, t.images, t.images_loaded), (30, 30, 30));
        assert_eq!(t.raw["url"], "http://www.example.com/?a=1&b=2");
        let unloaded = dom.replace("812.5", "0");
        assert!(parse_timing(&unloaded).is_err());
    }
}
