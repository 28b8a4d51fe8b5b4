/** jest: connection and model logic with a fake comm; protocol fixtures vs the schema. */
module.exports = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  testMatch: ['<rootDir>/src/__tests__/**/*.spec.ts'],
  transform: {
    '^.+\\.tsx?$': [
      'ts-jest',
      {
        tsconfig: {
          module: 'commonjs',
          esModuleInterop: true,
          resolveJsonModule: true,
          strict: true,
          target: 'ES2022',
          lib: ['DOM', 'ES2022'],
          types: ['jest', 'node']
        }
      }
    ]
  }
};
