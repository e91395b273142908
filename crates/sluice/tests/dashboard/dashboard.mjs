// Drives the dashboard in Debian's Chromium (playwright-core, no downloaded browser).
//   node dashboard.mjs <status url> <admin key> [screenshot.png]
// 1. Loads /dashboard/, checks that the configured routes and the upstream's node show, gives
//    the admin key through the page's form and checks that the routes' paths come from the
//    admin API; prints READY and waits for a line on stdin.
// 2. "HELD" (the test wrote a file that is refused): waits for the refusal to show; prints
//    HELD. "CLEARED" (the test put the file back): waits for it to go, and for the newest
//    configuration change to say "accepted"; prints CLEARED.
// 3. "GO" (the test stopped the node): waits for the node to show as unhealthy; prints
//    "UNHEALTHY <seconds>", takes the screenshot when asked, exits 0. Any failure exits 1 with
//    the reason.
import { chromium } from "playwright-core";
import readline from "node:readline";

const [url, key, shot] = process.argv.slice(2);
const fail = (why) => { console.error(why); process.exit(1); };

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 820 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(`${url}/dashboard/`);
  // From the metrics alone: the routes that served requests, the upstream's node.
  await page.waitForSelector('tr[data-route="shop"]', { timeout: 10000 });
  await page.waitForSelector('[data-upstream="web"] .healthy', { timeout: 10000 });
  // The admin API asks for its key: the page asks for it and keeps it in the tab.
  await page.waitForSelector("#key-section:not([hidden])", { timeout: 10000 });
  await page.fill("#key", key);
  await page.click("#key-form button");
  // With the key, every configured route, with what it matches (api served nothing yet).
  await page.waitForFunction(
    () => document.querySelector('tr[data-route="shop"]')?.textContent.includes("/shop/*")
      && document.querySelector('tr[data-route="api"]')?.textContent.includes("/api/*"),
    null, { timeout: 10000 });
  const stored = await page.evaluate(() => sessionStorage.getItem("sluice-admin-key"));
  if (stored !== key) fail("the key is not in the tab's sessionStorage");
  const local = await page.evaluate(() => localStorage.length);
  if (local !== 0) fail("the page wrote to localStorage");
  const total = await page.textContent('tr[data-route="shop"] td:last-child');
  if (Number(total.replace(/[^0-9]/g, "")) < 3) fail(`shop's total is ${total}`);
  console.log("READY");
  const rl = readline.createInterface({ input: process.stdin });
  const lines = rl[Symbol.asyncIterator]();
  for (;;) {
    const { value: command } = await lines.next();
    if (command === "HELD") {
      await page.waitForFunction(
        () => !document.querySelector("#held").hidden
          && document.querySelector("#held-errors").textContent.includes("upstream_id"),
        null, { timeout: 10000 });
      console.log("HELD");
    } else if (command === "CLEARED") {
      await page.waitForFunction(
        () => document.querySelector("#held").hidden
          && document.querySelector("#changes tbody tr td:nth-child(2)")?.textContent === "accepted",
        null, { timeout: 10000 });
      console.log("CLEARED");
    } else {
      break;
    }
  }
  const t0 = Date.now();
  await page.waitForSelector('[data-upstream="web"] .unhealthy', { timeout: 15000 });
  console.log(`UNHEALTHY ${((Date.now() - t0) / 1000).toFixed(1)}`);
  if (errors.length) fail(`page errors: ${errors.join("; ")}`);
  if (shot) await page.screenshot({ path: shot, fullPage: true });
  rl.close();
} catch (e) {
  fail(String(e));
} finally {
  await browser.close();
}
