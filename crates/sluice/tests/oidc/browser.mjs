// Signs in and out through the gateway's openid-connect route in Debian's Chromium
// (playwright-core, no downloaded browser), as a person would:
//   node browser.mjs <app url> <logout url> <login>
// 1. Opens the app: the gateway sends the browser to the provider's login page; fills it in
//    (the provider's development login takes any login with any password) and consents;
//    the provider sends the browser back, the gateway sets its session and returns it to
//    the app. Prints "SIGNED-IN <page text>". Opens the app again (the session alone lets
//    it in) and prints "AGAIN <page text>".
// 2. Opens the logout path: the gateway clears its session and sends the browser to the
//    provider's end-session page; confirms. Prints "SIGNED-OUT <url>".
// 3. Opens the app again: the login page must show. Prints "LOGIN-AGAIN". Exits 0; any
//    failure exits 1 with the reason.
import { chromium } from "playwright-core";

const [app, logout, login] = process.argv.slice(2);
const fail = (why) => { console.error(why); process.exit(1); };

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage();
  await page.goto(app);
  await page.waitForSelector('input[name="login"]', { timeout: 10000 });
  await page.fill('input[name="login"]', login);
  await page.fill('input[name="password"]', "pw");
  await page.click('button[type="submit"]');
  // The consent page, the first time.
  await page.waitForLoadState("load");
  if (page.url().includes("/interaction/")) {
    await page.click('button[type="submit"]');
  }
  await page.waitForURL(app, { timeout: 10000 });
  console.log("SIGNED-IN " + (await page.textContent("body")).trim());
  await page.goto(app);
  if (page.url() !== app) fail(`the session did not hold: at ${page.url()}`);
  console.log("AGAIN " + (await page.textContent("body")).trim());
  await page.goto(logout);
  await page.waitForSelector('button[name="logout"]', { timeout: 10000 });
  await page.click('button[name="logout"]');
  await page.waitForLoadState("load");
  console.log("SIGNED-OUT " + page.url());
  await page.goto(app);
  await page.waitForSelector('input[name="login"]', { timeout: 10000 });
  console.log("LOGIN-AGAIN");
} catch (e) {
  fail(String(e));
} finally {
  await browser.close();
}
