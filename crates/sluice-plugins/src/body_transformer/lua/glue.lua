-- Sluice's glue around lua-resty-template: what APISIX's apisix/plugins/body-transformer.lua
-- does around it (its escape_xml and reserved names; its XML decoding is in xml.rs), and the
-- sandbox the templates run in. Loaded once per worker interpreter, before the globals are taken away.
local T, escape_json, load = ...
local setmetatable, error = setmetatable, error

-- A view of `t` that cannot be changed, nor its metatable read or replaced: templates of
-- every route share these.
local function readonly(t)
    return setmetatable({}, {
        __index = t,
        __newindex = function() error("this table cannot be changed", 2) end,
        __metatable = false,
    })
end

-- What a template sees besides its data: the safe base functions and read-only views of the
-- string, table, math and utf8 libraries; no io, os, load, require, pcall, rawset or debug.
local SAFE = {}
for _, name in ipairs({"assert", "error", "ipairs", "next", "pairs", "select", "tonumber",
                       "tostring", "type", "rawequal", "rawget", "rawlen", "setmetatable",
                       "getmetatable"}) do
    SAFE[name] = _G[name]
end
for _, lib in ipairs({"string", "table", "math", "utf8"}) do
    SAFE[lib] = readonly(_G[lib])
end
SAFE._VERSION = _VERSION
SAFE = readonly(SAFE)

-- The library's functions the code it generates calls; `include` (other template files) is
-- not offered.
local TEMPLATE = readonly({
    escape = T.escape,
    output = T.output,
    process = function() error("include is not supported: templates are not files", 2) end,
})
-- lua-resty-template's view environment: a name is the data's, else the library's, else a
-- safe global (its VIEW_ENV, over SAFE instead of the globals).
local rawget = rawget
local ENV = { __index = function(t, k)
    local context = rawget(t, "context")
    return (context and context[k]) or TEMPLATE[k] or SAFE[k]
end }

local function escape_xml(s)
    return s:gsub("&", "&amp;")
        :gsub("<", "&lt;")
        :gsub(">", "&gt;")
        :gsub("'", "&apos;")
        :gsub('"', "&quot;")
end

local M = {}

-- A template's function: the library turns it into Lua (always as text, never as a file
-- name), loaded as text only into an environment of its own over SAFE.
function M.compile(text)
    local code = T.parse(text, true)
    local fn, err = load(code, "=template", "t", setmetatable({ template = TEMPLATE }, ENV))
    if not fn then
        error(err, 0)
    end
    return fn
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
