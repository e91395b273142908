export const ENDPOINT_CONFIG = '/apisix/admin/configs';
export const HEADER_CREDENTIAL = 'X-API-KEY';
export const HEADER_LAST_MODIFIED = 'x-last-modified';
export const HEADER_DIGEST = 'x-digest';
