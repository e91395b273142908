// A real OpenID provider for the openid-connect tests: panva's oidc-provider (OpenID
// Certified), on 127.0.0.1 only. Usage: node provider.mjs PORT REDIRECT_URI POST_LOGOUT_URI
// Prints "listening" once it accepts connections.
//
// One client, `sluice` (secret below), allowed the authorization-code flow (for browsers,
// signing in as any user with the password "pw" through the provider's own login page), the
// client-credentials grant (for tests that need a token without a browser) and refresh.
// Access tokens for the resource `urn:sluice:jwt` are JWTs signed with the provider's
// keys (checked through its JWKS); for `urn:sluice:opaque` they are opaque (checked by
// introspection).
import Provider from 'oidc-provider';

const [port, redirectUri, postLogoutUri] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;

const resources = {
  'urn:sluice:jwt': { scope: 'read write', audience: 'sluice', accessTokenFormat: 'jwt', jwt: { sign: { alg: 'RS256' } } },
  'urn:sluice:opaque': { scope: 'read write', audience: 'sluice', accessTokenFormat: 'opaque' },
};

const provider = new Provider(issuer, {
  clients: [{
    client_id: 'sluice',
    client_secret: 'sluice-client-secret',
    grant_types: ['authorization_code', 'client_credentials', 'refresh_token'],
    response_types: ['code'],
    redirect_uris: [redirectUri],
    post_logout_redirect_uris: [postLogoutUri],
    token_endpoint_auth_method: 'client_secret_basic',
    introspection_endpoint_auth_method: 'client_secret_basic',
    scope: 'openid profile email offline_access read write',
  }],
  features: {
    devInteractions: { enabled: true },
    introspection: { enabled: true, allowedPolicy: async () => true },
    clientCredentials: { enabled: true },
    rpInitiatedLogout: { enabled: true },
    resourceIndicators: {
      enabled: true,
      // Only when asked for (the client-credentials tests): a browser's access token is the
      // provider's own, good at its userinfo endpoint.
      defaultResource: async () => undefined,
      useGrantedResource: async () => false,
      getResourceServerInfo: async (ctx, resource) => {
        const info = resources[resource];
        if (!info) throw new Error(`unknown resource ${resource}`);
        return info;
      },
    },
  },
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
  findAccount: async (ctx, sub) => ({
    accountId: sub,
    claims: async () => ({ sub, email: `${sub}@example.com`, email_verified: true, name: `User ${sub}` }),
  }),
  scopes: ['openid', 'profile', 'email', 'offline_access', 'read', 'write'],
  pkce: { required: () => false },
  ttl: { AccessToken: 600, ClientCredentials: 600, IdToken: 600, Session: 3600, Interaction: 600, Grant: 3600 },
});
// Plain HTTP on loopback: its cookies cannot be Secure.
provider.proxy = false;

const server = provider.listen(Number(port), '127.0.0.1', () => console.log('listening'));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
