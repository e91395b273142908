export * from './backend';
export * from './converter';
export * from './core';
export * from './utils';
