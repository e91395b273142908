export { DifferV3, DifferV3 as Differ } from './differv3.js';
