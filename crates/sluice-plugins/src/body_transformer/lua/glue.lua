-- Sluice's glue around the vendored libraries: what APISIX's
-- apisix/plugins/body-transformer.lua does around them (its remove_namespace, escape_xml and
-- the reserved names), so that its templates see the same values here.
local template, XmlParser, tree, escape_json = ...
local pairs, type, next, setmetatable, format = pairs, type, next, setmetatable, string.format

-- APISIX's: "ns:key" becomes "key"; an empty element becomes "".
local function remove_namespace(tbl)
    local res = {}
    for k, v in pairs(tbl) do
        if type(v) == "table" then
            if next(v) == nil then
                v = ""
            else
                v = remove_namespace(v)
            end
        end
        if type(k) == "string" then
            local newk = k:match(".*:(.*)")
            if newk then
                k = newk
            end
        end
        res[k] = v
    end
    return res
end

local function escape_xml(s)
    return s:gsub("&", "&amp;")
        :gsub("<", "&lt;")
        :gsub(">", "&gt;")
        :gsub("'", "&apos;")
        :gsub('"', "&quot;")
end

local M = {}

-- A template is always text here, never a file name (`plain`), and never cached by the
-- library (Sluice keeps the compiled function).
function M.compile(text)
    return template.compile(text, "no-cache", true)
end

-- xml2lua's tree, as APISIX's `xml` decoder makes it.
function M.decode_xml(data)
    local handler = tree:new()
    local parser = XmlParser.new(handler, {
        stripWS = 1,
        expandEntities = 1,
        errorHandler = function(msg, pos)
            error(format("%s [char=%d]", msg or "Parse Error", pos))
        end,
    })
    parser:parse(data)
    return remove_namespace(handler.root)
end

-- Renders `fn` over the decoded body `out`, with APISIX's helpers; the body's own fields
-- cannot shadow them.
function M.render(fn, out, ctx, body, multipart)
    out._ctx = nil
    out._body = nil
    out._escape_xml = nil
    out._escape_json = nil
    out._multipart = nil
    setmetatable(out, {__index = {
        _ctx = ctx,
        _body = body,
        _escape_xml = escape_xml,
        _escape_json = escape_json,
        _multipart = multipart,
    }})
    return fn(out)
end

return M
