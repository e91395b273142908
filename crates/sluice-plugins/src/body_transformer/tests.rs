use std::rc::Rc;

use sluice_core::body::RequestBody;

use super::*;
use crate::tests::{build, ctx, head, run, try_build, yaml_value};

/// The body forwarded upstream after the request phase, or the answer's status and body.
fn request(config: &str, raw_head: &str, body: &str) -> Result<String, (u16, String)> {
    let built = build("body-transformer", config, &[]);
    let mut req = head(raw_head);
    let mut cx = ctx(&[], crate::tests::CLIENT);
    cx.set_body(Rc::new(RequestBody::new(Some(Bytes::copy_from_slice(
        body.as_bytes(),
    )))));
    if let Some(r) = run(&*built.plugin, &mut req, &mut cx) {
        return Err((r.status, crate::tests::body(&r)));
    }
    let out = cx.take_request_body().expect("a new body").body;
    Ok(String::from_utf8(out.to_vec()).unwrap())
}

const POST_JSON: &str =
    "POST /anything HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1\r\n\r\n";

/// APISIX's documented examples, as its docs give them.
#[test]
fn apisix_s_examples_render_as_documented() {
    let modify = r#"{request: {template: "{\"foo\":\"{{name .. \" world\"}}\",\"bar\":{{age+10}}}"}}"#;
    assert_eq!(
        request(modify, POST_JSON, r#"{"name":"hello","age":20}"#).unwrap(),
        r#"{"foo":"hello world","bar":30}"#
    );
    // `_ctx.var`: a GET's arguments.
    let vars = r#"{request: {template: "{\"foo\":\"{{_ctx.var.arg_name .. \" world\"}}\"}"}}"#;
    assert_eq!(
        request(vars, "GET /anything?name=hello HTTP/1.1\r\nHost: x\r\n\r\n", "").unwrap(),
        r#"{"foo":"hello world"}"#
    );
    // A form body.
    let encoded = r#"{request: {input_format: encoded, template: "{\"foo\":\"{{name .. \" world\"}}\",\"bar\":{{age+10}}}"}}"#;
    let form = "POST /anything HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1\r\n\r\n";
    assert_eq!(
        request(encoded, form, "name=hello&age=20").unwrap(),
        r#"{"foo":"hello world","bar":30}"#
    );
    // JSON to a SOAP request, escaped for XML.
    let soap = r#"{request: {input_format: json, template: "<ns0:name>{{_escape_xml(name)}}</ns0:name>"}}"#;
    assert_eq!(
        request(soap, POST_JSON, r#"{"name":"A&B"}"#).unwrap(),
        "<ns0:name>A&amp;amp;B</ns0:name>",
        "{{}} escapes for HTML after _escape_xml, as lua-resty-template does"
    );
    let raw = r#"{request: {template: "<n>{*_escape_xml(name)*}</n>"}}"#;
    assert_eq!(
        request(raw, POST_JSON, r#"{"name":"A&\"B"}"#).unwrap(),
        "<n>A&amp;&quot;B</n>"
    );
    // Lua statements, loops, and _body.
    let code = r#"{request: {template: "{% for _, v in ipairs(items) do %}[{{v}}]{% end %}|{*_body*}"}}"#;
    assert_eq!(
        request(code, POST_JSON, r#"{"items":[1,"x"]}"#).unwrap(),
        r#"[1][x]|{"items":[1,"x"]}"#
    );
}

/// XML decodes as APISIX's xml2lua tree with namespaces removed; the response template
/// reads the status.
#[test]
fn an_xml_response_becomes_json() {
    let built = build(
        "body-transformer",
        r#"{response: {template: "{% if Envelope.Body.Fault == nil then %}{\"status\":\"{{_ctx.var.status}}\",\"capital\":\"{{Envelope.Body.getCountryResponse.country.capital}}\",\"population\":{{Envelope.Body.getCountryResponse.country.population}}}{% else %}{\"message\":{*_escape_json(Envelope.Body.Fault.faultstring[1])*}}{% end %}"}}"#,
        &[],
    );
    let xml = r#"<?xml version="1.0"?><SOAP-ENV:Envelope xmlns:SOAP-ENV="http://schemas.xmlsoap.org/soap/envelope/"><SOAP-ENV:Header/><SOAP-ENV:Body><ns2:getCountryResponse xmlns:ns2="http://spring.io/guides/gs-producing-web-service"><ns2:country><ns2:name>Spain</ns2:name><ns2:population>46704314</ns2:population><ns2:capital>Madrid</ns2:capital></ns2:country></ns2:getCountryResponse></SOAP-ENV:Body></SOAP-ENV:Envelope>"#;
    let fault = r#"<SOAP-ENV:Envelope xmlns:SOAP-ENV="http://schemas.xmlsoap.org/soap/envelope/"><SOAP-ENV:Body><SOAP-ENV:Fault><faultcode>SOAP-ENV:Server</faultcode><faultstring xml:lang="en">Your "name" cannot be empty</faultstring></SOAP-ENV:Fault></SOAP-ENV:Body></SOAP-ENV:Envelope>"#;
    for (status, body, want) in [
        (
            200,
            xml,
            r#"{"status":"200","capital":"Madrid","population":46704314}"#,
        ),
        (500, fault, r#"{"message":"Your \"name\" cannot be empty"}"#),
    ] {
        let resp = Response::new(status).header("Content-Type", b"text/xml;charset=utf-8");
        let req = head("POST /ws HTTP/1.1\r\nHost: x\r\n\r\n");
        let mut cx = ctx(&[], crate::tests::CLIENT);
        built
            .plugin
            .header_filter(&req, ResponseView::Own(&resp), &mut cx);
        assert!(cx.response.removes(b"content-length"));
        // In pieces, as a node sends it.
        let (a, b) = body.split_at(40);
        let mut first = Bytes::copy_from_slice(a.as_bytes());
        built.plugin.body_filter(&mut first, false, &mut cx);
        assert!(first.is_empty(), "held until the end");
        let mut last = Bytes::copy_from_slice(b.as_bytes());
        built.plugin.body_filter(&mut last, true, &mut cx);
        assert_eq!(std::str::from_utf8(&last).unwrap(), want);
    }
}

/// A template that would never end, or grow without end, fails its request and no other;
/// the sandbox has no way out to the host.
#[test]
fn templates_are_bounded_and_sandboxed() {
    let (status, msg) = request(
        r#"{request: {template: "{% while true do end %}"}}"#,
        POST_JSON,
        "{}",
    )
    .unwrap_err();
    assert_eq!(status, 503);
    assert!(msg.contains("ran too long"), "{msg}");
    let (status, msg) = request(
        r#"{request: {template: "{% local t = {} while true do t[#t + 1] = string.rep('x', 1048576) end %}"}}"#,
        POST_JSON,
        "{}",
    )
    .unwrap_err();
    assert_eq!(status, 503, "{msg}");
    assert!(msg.contains("memory"), "{msg}");
    // The same thread's interpreter still works.
    assert_eq!(
        request(r#"{request: {template: "{{a}}"}}"#, POST_JSON, r#"{"a":1}"#).unwrap(),
        "1"
    );
    for escape in [
        "{* os.execute('true') *}",
        "{* io.open('/etc/passwd') *}",
        "{* require('os') *}",
        "{* load('return 1')() *}",
        "{* pcall(error) *}",
        "{* string.dump(print) *}",
        "{* rawset(string, 'upper', nil) *}",
        "{* template.compile('x') *}",
        "{* getmetatable('').__index *}",
        "{* template.new(true) *}",
    ] {
        let config = format!("{{request: {{template: {}}}}}", serde_json::json!(escape));
        let (status, msg) = request(&config, POST_JSON, "{}").unwrap_err();
        assert_eq!(status, 503, "{escape}: {msg}");
        assert!(msg.contains("nil") || msg.contains("boolean"), "{escape}: {msg}");
    }
    // What templates share cannot be changed by one of them.
    for poison in [
        "{% string.upper = nil %}",
        "{% template.escape = tostring %}",
        "{% table.concat = nil %}",
        "{% setmetatable(string, {}) %}",
    ] {
        let config = format!("{{request: {{template: {}}}}}", serde_json::json!(poison));
        let (status, msg) = request(&config, POST_JSON, "{}").unwrap_err();
        assert_eq!(status, 503, "{poison}: {msg}");
    }
    assert_eq!(
        request(
            r#"{request: {template: "{{string.upper(a)}}"}}"#,
            POST_JSON,
            r#"{"a":"<x>"}"#
        )
        .unwrap(),
        "&lt;X&gt;"
    );
    // A body field cannot shadow the helpers.
    assert_eq!(
        request(
            r#"{request: {template: "{*_escape_json(a)*}"}}"#,
            POST_JSON,
            r#"{"a":"x\"y","_escape_json":1}"#
        )
        .unwrap(),
        r#""x\"y""#
    );
}

#[test]
fn bad_bodies_and_configurations_are_refused() {
    let (status, msg) = request(
        r#"{request: {template: "{{a}}"}}"#,
        POST_JSON,
        "{not json",
    )
    .unwrap_err();
    assert_eq!(status, 400);
    assert!(msg.contains("request body decode"), "{msg}");
    let (status, _) = request(
        r#"{request: {input_format: xml, template: "{{a}}"}}"#,
        POST_JSON,
        "<a><b></a>",
    )
    .unwrap_err();
    assert_eq!(status, 400);
    let (status, _) = request(
        r#"{max_req_body_size: 4, request: {template: "{{a}}"}}"#,
        POST_JSON,
        r#"{"a":12345}"#,
    )
    .unwrap_err();
    assert_eq!(status, 413);
    let errors = |yaml: &str| {
        try_build("body-transformer", &yaml_value(yaml), &[], sluice_core::Scope::Route)
            .err()
            .unwrap_or_default()
    };
    assert_eq!(
        errors("{request: {template: '{{ a .. }}'}}"),
        ["request.template: does not compile: in the Lua it becomes, line 5: unexpected symbol near ')'"]
    );
    assert_eq!(
        errors("{response: {template: x, input_format: yaml}}"),
        ["response.input_format: unknown format \"yaml\", expected xml, json, encoded, args, plain or multipart"]
    );
    assert_eq!(
        errors("{max_req_body_size: 0}"),
        [
            "give request, response or both",
        ]
    );
    assert_eq!(
        errors("{request: {template: '!!', template_is_base64: true}}"),
        ["request.template: template_is_base64 is set, but it is not base64 text"]
    );
}

/// XML decodes as xml2lua's tree does: text elements are their text, repeated ones a list,
/// attributes `_attr`, empty elements "", namespaces removed; a body no parser could read
/// fast is read in linear time.
#[test]
fn xml_reads_as_xml2lua_s_tree() {
    let t = |template: &str, xml: &str| {
        let config = format!(
            "{{request: {{input_format: xml, template: {}}}}}",
            serde_json::json!(template)
        );
        request(&config, POST_JSON, xml)
    };
    let doc = r#"<?xml version="1.0"?><!-- c --><a:root xmlns:a="urn:a"><item>1</item><item>2</item><one id="7">x</one><empty/><mixed>t<b>u</b></mixed><e>&lt;&#65;&amp;&unknown;</e><![CDATA[raw <c>]]></a:root>"#;
    assert_eq!(
        t(
            "{{#root.item}}|{{root.item[2]}}|{{root.one[1]}}|{{root.one._attr.id}}|[{{root.empty}}]|{{root.mixed}}|{*root.e*}|{*root[1]*}|{{root._attr.a}}",
            doc
        )
        .unwrap(),
        "2|2|x|7|[]|t|<A&&unknown;|raw <c>|urn:a"
    );
    for (bad, why) in [
        ("<a><b></a>", "mismatch"),
        ("<a>", "not closed"),
        ("text<a/>", "outside"),
    ] {
        let (status, msg) = t("x", bad).unwrap_err();
        assert_eq!(status, 400, "{bad}: {msg}");
        assert!(msg.contains("request body decode"), "{bad}: {why}: {msg}");
    }
    // What made xml2lua's patterns quadratic: a 1 MiB tag name, a thousand unclosed `<?`.
    let long = format!("<{}/>", "a".repeat(1 << 20));
    assert_eq!(t("ok", &long).unwrap(), "ok");
    let (status, _) = t("x", &"<?".repeat(100_000)).unwrap_err();
    assert_eq!(status, 400);
}

/// A base64 template without `input_format` is decoded when the body's Content-Type gives a
/// format other than `encoded` and `args`, as in APISIX.
#[test]
fn base64_templates_follow_the_detected_format() {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode("{{a}}-b64");
    let config = format!("{{request: {{template: {b64}}}}}");
    assert_eq!(request(&config, POST_JSON, r#"{"a":"j"}"#).unwrap(), "j-b64");
    let form = "POST /x HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1\r\n\r\n";
    assert_eq!(request(&config, form, "a=f").unwrap(), b64, "encoded: the text as it is");
}

/// A HEAD answer, a 204 and a 304 get no body from the template.
#[test]
fn answers_without_a_body_keep_none() {
    let built = build("body-transformer", r#"{response: {template: "made"}}"#, &[]);
    for (method, status) in [("HEAD", 200), ("GET", 204), ("GET", 304)] {
        let req = head(&format!("{method} / HTTP/1.1\r\nHost: x\r\n\r\n"));
        let mut cx = ctx(&[], crate::tests::CLIENT);
        let resp = Response::new(status);
        built.plugin.header_filter(&req, ResponseView::Own(&resp), &mut cx);
        let mut last = Bytes::new();
        built.plugin.body_filter(&mut last, true, &mut cx);
        assert!(last.is_empty(), "{method} {status}");
    }
    let req = head("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut cx = ctx(&[], crate::tests::CLIENT);
    let resp = Response::new(200);
    built.plugin.header_filter(&req, ResponseView::Own(&resp), &mut cx);
    let mut last = Bytes::new();
    built.plugin.body_filter(&mut last, true, &mut cx);
    assert_eq!(&last[..], b"made");
}

/// A multipart form's fields, by its Content-Type's boundary; `_multipart` holds them too.
#[test]
fn multipart_forms_are_read_by_field() {
    let body = "--XyZ\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nada\r\n--XyZ\r\nContent-Disposition: form-data; name=\"tag\"\r\n\r\na\r\n--XyZ\r\nContent-Disposition: form-data; name=\"tag\"\r\n\r\nb\r\n--XyZ--\r\n";
    let raw = format!(
        "POST /f HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=XyZ\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    assert_eq!(
        request(
            r#"{request: {template: "{{name}} {{tag[1]}}{{tag[2]}} {{_multipart.name}}"}}"#,
            &raw,
            body
        )
        .unwrap(),
        "ada ab ada"
    );
    let (status, msg) = request(
        r#"{request: {input_format: multipart, template: "x"}}"#,
        POST_JSON,
        "{}",
    )
    .unwrap_err();
    assert_eq!(status, 400, "{msg}");
}
