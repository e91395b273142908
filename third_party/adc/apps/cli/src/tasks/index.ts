export * from './load_local';
export * from './load_remote';
export * from './diff';
export * from './lint';
export * from './experimental';
